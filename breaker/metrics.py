"""The guard's Prometheus metrics: a collector over the counts the guard keeps, served at /metrics by
the official client library (prometheus-client) on a thread of its own.

The event loop never waits for a scrape and the HTTP thread never reads the loop's structures: each
tick (10 Hz) the server hands `GuardCollector.view` a new frozen `MetricsView` it built on the loop,
and a scrape only formats the latest one. A view older than STALE seconds means the loop is stuck, and
the scrape fails (503) so that `up` says so. Nothing served here changes the guard: it answers GET on
/metrics and nothing else. A slow client holds a slot for a bounded time (a deadline per request, not
per read) and never keeps a scrape out (a new connection takes the slot of the oldest one still sending).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from breaker import __version__
from breaker.config import metrics_address
from breaker.protocol import PROTOCOL_VERSION
from breaker.tally import BUCKETS, DECISIONS, TallyCopy
from breaker.vocab import Plane

__all__ = ["STALE", "GuardCollector", "MetricsError", "MetricsServer", "MetricsView"]

log = logging.getLogger("cbconsole.guard")

STALE = 5.0  # seconds without a fresh view from the event loop before a scrape fails
MAX_SCRAPES = 4  # connections served at once (a flood cannot pile up threads)
REQUEST_DEADLINE = 10.0  # seconds from a connection's accept to its whole request read
RESPONSE_DEADLINE = 10.0  # seconds from its request read to its whole response sent


class MetricsError(Exception):
    """The metrics could not be served where asked (the message says where and why)."""


@dataclass(frozen=True, slots=True)
class MetricsView:
    """What one scrape shows, made on the event loop."""

    taken: float  # time.monotonic() when the loop made it
    tally: TallyCopy
    agents: int
    interrupted: int
    connections: tuple[tuple[Plane, int], ...]  # (plane, open connections)
    paused: bool
    enabled: bool  # the config's `enabled`, and the row not `disabled`
    reloads_ok: int
    reloads_failed: int
    config_ok: bool  # the last reload of the patch layer was applied
    state_ok: bool | None  # the state file is being written (None: the guard keeps none)
    incidents_dropped: int
    commands_dropped: int


class GuardCollector:
    """A prometheus-client collector reading the latest `MetricsView` (set by the event loop)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.view: MetricsView | None = None
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        view = self.view  # one read: the loop replaces the reference, never the object
        if view is None:
            raise _StaleCounts("the guard has not published its counts yet")
        age = self.clock() - view.taken
        if age > STALE:
            raise _StaleCounts(f"the guard's event loop has not published its counts for {age:.0f} s")
        yield from _families(view)


def _families(view: MetricsView) -> Iterator[Metric]:
    tally = view.tally
    info = GaugeMetricFamily(
        "cbconsole_build_info", "The guard's version and protocol version (always 1).", labels=["version", "protocol"]
    )
    info.add_metric([__version__, str(PROTOCOL_VERSION)], 1)
    yield info

    checks = CounterMetricFamily(
        "cbconsole_checks_total",
        "Checks answered since the guard started, by the agent's harness and the decision "
        "(allow: judged and allowed; pass: not judged; warn: allowed with a warning; deny).",
        labels=["harness", "decision"],
    )
    for label, counts in tally.checks:
        for decision, n in zip(DECISIONS, counts, strict=True):
            checks.add_metric([label, decision], n)
    yield checks

    for name, rows, label, text in (
        ("cbconsole_denies_total", tally.denies, "kind", "Calls denied since the guard started, by kind."),
        (
            "cbconsole_trips_total",
            tally.trips,
            "kind",
            "Trips since the guard started: an agent's first deny of a kind (what the incident log records).",
        ),
        (
            "cbconsole_warnings_total",
            tally.warnings,
            "rule",
            "Calls allowed with a warning since the guard started, by the rule that warned.",
        ),
    ):
        family = CounterMetricFamily(name, text, labels=[label])
        for value, n in rows:
            family.add_metric([value], n)
        yield family

    yield GaugeMetricFamily("cbconsole_agents", "Agents the guard tracks.", value=view.agents)
    yield GaugeMetricFamily(
        "cbconsole_interrupted_agents", "Agents under an operator interrupt.", value=view.interrupted
    )
    connections = GaugeMetricFamily(
        "cbconsole_connections", "Open connections, by socket (harness or operator).", labels=["plane"]
    )
    for plane, n in view.connections:
        connections.add_metric([plane], n)
    yield connections

    cumulative, running = [], 0
    for bound, n in zip((*BUCKETS, float("inf")), tally.buckets, strict=True):
        running += n
        cumulative.append((floatToGoString(bound), running))
    yield HistogramMetricFamily(
        "cbconsole_check_duration_seconds",
        "The server's time per check, from reading the frame to the reply (since the metrics were switched on).",
        buckets=cumulative,
        sum_value=tally.seconds,
    )

    reloads = CounterMetricFamily(
        "cbconsole_config_reloads_total",
        "Reads of the patch layer since the guard started, by result (ok: in force; error: the last good config kept).",
        labels=["result"],
    )
    reloads.add_metric(["ok"], view.reloads_ok)
    reloads.add_metric(["error"], view.reloads_failed)
    yield reloads
    yield GaugeMetricFamily(
        "cbconsole_config_last_reload_successful",
        "1 if the last read of the patch layer was applied, 0 if a file is broken (the last good config is in force).",
        value=int(view.config_ok),
    )
    yield GaugeMetricFamily("cbconsole_paused", "1 while the operator has paused the guard.", value=int(view.paused))
    yield GaugeMetricFamily(
        "cbconsole_enabled",
        "1 while the config lets the guard judge calls (enabled, row not disabled).",
        value=int(view.enabled),
    )
    if view.state_ok is not None:
        yield GaugeMetricFamily(
            "cbconsole_state_save_successful",
            "1 while the guard's state file is being written, 0 after a save failed (a restart would forget).",
            value=int(view.state_ok),
        )
    yield CounterMetricFamily(
        "cbconsole_incident_lines_dropped_total",
        "Incident log lines the log's queue had no room for.",
        value=view.incidents_dropped,
    )
    yield CounterMetricFamily(
        "cbconsole_interrupt_commands_dropped_total",
        "Interrupt commands the queue had no room for.",
        value=view.commands_dropped,
    )


class _StaleCounts(Exception):
    pass


@dataclass(slots=True)
class _Visit:
    """One connection being served: until when, and whether its request is still arriving."""

    sock: socket.socket
    since: float
    deadline: float
    reading: bool = True


class _Handler(WSGIRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_deadline)  # no single read waits past the whole request's

    def parse_request(self) -> bool:
        """The request is read: answer it unless its connection was cut meanwhile."""
        return super().parse_request() and self.server.answering(self.request)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most `slots` connections served at once, each with a deadline: its whole
    request within `request_deadline` seconds of its accept, its whole response within `response_deadline`
    of its request. A connection past its deadline is shut down (at most half a second late). When every
    slot is taken, a new connection takes the slot of the oldest one still sending its request, so clients
    that dribble their requests cannot keep a scrape out; if every slot is answering, it is closed unanswered."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[Any, ...],
        family: socket.AddressFamily,
        *,
        slots: int,
        request_deadline: float,
        response_deadline: float,
    ) -> None:
        self.address_family = family
        self.slots = slots
        self.request_deadline = request_deadline
        self.response_deadline = response_deadline
        self._visits: dict[Any, _Visit] = {}  # by connection; a connection cut is no longer here
        self._running = 0  # handler threads, cut ones included (they end as soon as their socket is shut)
        self._lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        # HTTPServer.server_bind asks DNS for the host's full name; a scrape never needs it.
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])
        self.setup_environ()

    def process_request(self, request: Any, client_address: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if self._running >= 2 * self.slots:  # cut connections' threads not yet ended: never pile up threads
                self.shutdown_request(request)
                return
            if len(self._visits) >= self.slots:
                waiting = [v for v in self._visits.values() if v.reading]
                if not waiting:
                    self.shutdown_request(request)  # every slot is answering a request
                    return
                self._cut(min(waiting, key=lambda v: v.since))
            self._visits[request] = _Visit(request, now, now + self.request_deadline)
            self._running += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._ended(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._ended(request)

    def _ended(self, request: Any) -> None:
        with self._lock:
            self._visits.pop(request, None)
            self._running -= 1

    def answering(self, request: Any) -> bool:
        """Its request is read: it now has `response_deadline` to be answered. False: it was cut meanwhile."""
        with self._lock:
            visit = self._visits.get(request)
            if visit is None:
                return False
            visit.reading = False
            visit.deadline = time.monotonic() + self.response_deadline
            return True

    def service_actions(self) -> None:
        """Run by serve_forever's loop at least every poll interval: cut every connection past its deadline."""
        now = time.monotonic()
        with self._lock:
            for visit in [v for v in self._visits.values() if v.deadline <= now]:
                self._cut(visit)

    def _cut(self, visit: _Visit) -> None:
        """Shut a connection down (its thread's read or write returns at once and the thread ends; the
        thread closes it). Called with the lock held."""
        del self._visits[visit.sock]
        with contextlib.suppress(OSError):
            visit.sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that vanished, timed out or was cut: nothing to report (scrapes are not logged)."""
        log.debug("metrics: a request from %s ended in an error", client_address, exc_info=True)


class MetricsServer:
    """/metrics on HOST:PORT, served by a thread of its own until `close()`.

    At most `slots` connections are served at once; each must send its whole request within
    `request_deadline` seconds and be sent its whole response within `response_deadline` seconds after."""

    def __init__(
        self,
        address: str,
        collector: GuardCollector,
        *,
        slots: int = MAX_SCRAPES,
        request_deadline: float = REQUEST_DEADLINE,
        response_deadline: float = RESPONSE_DEADLINE,
    ) -> None:
        where = metrics_address(address)
        if where is None:
            raise MetricsError(f"cannot serve metrics on {address!r}: expected HOST:PORT, or PORT alone")
        host, port = where
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        self.registry = registry
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            self.httpd = _Server(
                sockaddr,
                family,
                slots=slots,
                request_deadline=request_deadline,
                response_deadline=response_deadline,
            )
        except OSError as exc:
            raise MetricsError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
        self.httpd.set_app(_app(make_wsgi_app(registry)))
        host, port = self.httpd.server_name, self.httpd.server_port
        self.url = f"http://[{host}]:{port}/metrics" if family == socket.AF_INET6 else f"http://{host}:{port}/metrics"
        poll = min(0.5, request_deadline / 4, response_deadline / 4)  # how late a deadline may be enforced
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(poll,), name="metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving (blocking for up to half a second: run it off the event loop)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def _app(metrics: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """prometheus-client's app on /metrics only (it answers GET and OPTIONS, 405 otherwise); 404 elsewhere;
    503 while the event loop has published nothing fresh."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") not in ("/metrics", "/metrics/"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"the guard serves its metrics at /metrics\n"]
        try:
            return metrics(environ, start_response)
        except _StaleCounts as exc:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{exc}\n".encode()]

    return app
