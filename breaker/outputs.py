"""The guard's outputs that run beside it: the Prometheus metrics server and the OpenTelemetry export.

Each is started, stopped or moved as the command-line flags and the config say, on the event loop
(imports, binds and flushes go to threads). Both modules are imported only once they are switched on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from breaker.config import Config
from breaker.jobs import DecisionJob
from breaker.listen import ServerError
from breaker.session import ServerSession

if TYPE_CHECKING:  # both are imported only once they are switched on
    from breaker.metrics import GuardCollector, MetricsServer, MetricsView
    from breaker.otel import DecisionExporter

__all__ = ["Outputs"]

log = logging.getLogger("cbconsole.guard")


class Outputs:
    """The metrics server and the OpenTelemetry export of one guard. `metrics_flag` (HOST:PORT) serves the
    metrics there whatever the `metrics` setting says (None follows the setting); `otel_flag` exports
    denies and warnings whatever `otelEvents` says. `view()` gives the metrics a fresh copy of the counts.
    The stats read `metrics_url`, `metrics_error`, `otel_on` and `otel_error`."""

    def __init__(
        self,
        session: ServerSession,
        *,
        metrics_flag: str | None,
        otel_flag: bool,
        view: Callable[[], MetricsView],
    ) -> None:
        self.session = session
        self.metrics_flag = metrics_flag
        self.otel_flag = otel_flag
        self.view = view
        self.metrics: MetricsServer | None = None
        self.collector: GuardCollector | None = None
        self.otel: DecisionExporter | None = None
        self.metrics_url = ""  # where the metrics are served ("" = not served)
        self.metrics_error: str | None = None  # why they could not be served where the config says
        self.otel_on = False
        self.otel_error: str | None = None
        self._metrics_for: str | None = None  # the address the running (or failed) metrics server was asked for
        self._otel_for = False
        self._lock = asyncio.Lock()  # one start, stop or move of the metrics or the export at a time

    async def follow(self, config: Config, *, fatal: bool) -> None:
        """Start, stop or move the metrics server and the export to what the flags and `config` say.
        At start a flag's failure is fatal (`fatal`: raise ServerError); a setting's is reported in the
        stats and the log, and tried again at the next reload that changes it."""
        async with self._lock:
            metrics = self.metrics_flag if self.metrics_flag is not None else config.metrics
            if metrics != self._metrics_for:
                await self._move_metrics(metrics, fatal=fatal and self.metrics_flag is not None)
            otel = self.otel_flag or config.otel_events
            if otel != self._otel_for:
                await self._switch_otel(otel, fatal=fatal and self.otel_flag)

    def publish(self) -> None:
        """Hand the metrics thread a fresh copy of the counts (on the loop, each tick)."""
        if self.metrics is not None and self.collector is not None:
            self.collector.view = self.view()

    def emit(self, job: DecisionJob) -> None:
        """Queue a deny or a warning for the export (dropped if the export is off)."""
        if self.otel is not None:
            self.otel.emit(job)

    async def close(self) -> None:
        async with self._lock:
            if self.metrics is not None:
                metrics, self.metrics = self.metrics, None
                await asyncio.to_thread(metrics.close)
            if self.otel is not None:
                otel, self.otel = self.otel, None
                self.session.export_decisions = False
                await _close_otel(otel)

    async def _move_metrics(self, address: str, *, fatal: bool) -> None:
        old, self.metrics = self.metrics, None
        if old is not None:
            await asyncio.to_thread(old.close)  # the old address is free before a new one is taken
            log.info("metrics no longer served at %s", old.url)
        self._metrics_for = address
        self.metrics_url, self.metrics_error = "", None
        self.session.timer = None
        if not address:
            return
        try:
            self.metrics = await asyncio.to_thread(self._serve_metrics, address)
        except Exception as exc:
            message = f"{exc} ({'--metrics' if self.metrics_flag is not None else 'the metrics setting'})"
            if fatal:
                raise ServerError(message) from None
            self.metrics_error = message
            log.error("%s", message)
            return
        self.metrics_url = self.metrics.url
        self.session.timer = time.perf_counter
        self.publish()
        log.info("metrics served at %s", self.metrics.url)

    def _serve_metrics(self, address: str) -> MetricsServer:
        """Off the loop: prometheus-client's import and the bind."""
        from breaker.metrics import GuardCollector, MetricsServer

        if self.collector is None:
            self.collector = GuardCollector()
        return MetricsServer(address, self.collector)

    async def _switch_otel(self, on: bool, *, fatal: bool) -> None:
        old, self.otel = self.otel, None
        self.session.export_decisions = False
        self._otel_for = on
        self.otel_on, self.otel_error = False, None
        if old is not None:
            await _close_otel(old)
            log.info("OpenTelemetry export stopped")
        if not on:
            return
        try:
            self.otel = await asyncio.to_thread(_make_exporter)
        except Exception as exc:
            source = "--otel" if self.otel_flag else "the otelEvents setting"
            message = f"OpenTelemetry export not started ({source}): {exc}"
            if fatal:
                raise ServerError(message) from None
            self.otel_error = message
            log.error("%s", message)
            return
        self.session.export_decisions = True
        self.otel_on = True
        log.info("denies and warnings exported over OTLP to %s", self.otel.endpoint)


def _make_exporter() -> DecisionExporter:
    """Off the loop: the OpenTelemetry SDK's import, and its exporter built from the OTEL_* variables."""
    try:
        from breaker.otel import DecisionExporter
    except ImportError as exc:
        raise ServerError(
            f"the OpenTelemetry SDK is not installed ({exc.name or exc}): pip install 'cbconsole[otel]'"
        ) from None
    return DecisionExporter()


async def _close_otel(exporter: DecisionExporter, wait: float = 3.0) -> None:
    """Flush and shut the export down on a thread of its own, waiting at most `wait` seconds: a collector
    that never answers must not hold up a stop (the thread is a daemon; the process may exit without it)."""
    done = asyncio.get_running_loop().create_future()
    loop = asyncio.get_running_loop()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def close() -> None:
        try:
            exporter.close()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop may be gone already
                loop.call_soon_threadsafe(finished)

    threading.Thread(target=close, name="otel-close", daemon=True).start()
    try:
        await asyncio.wait_for(done, wait)
    except TimeoutError:
        log.warning("the OpenTelemetry export did not finish within %.0f s; events still queued are lost", wait)
