"""OpenTelemetry export of every deny and warning (the optional `cbconsole[otel]` extra).

Each becomes one `gen_ai.evaluation.result` event (a log record with that event name), following the
OpenTelemetry GenAI semantic conventions (docs/metrics.md names the version and every attribute), and
goes out over OTLP/HTTP as the standard OTEL_* variables say (endpoint, headers, timeout, resource).
The event loop only queues the deny (a list append): a thread of ours builds the SDK's record (about
30-60 us each, too much for the loop during a flood of denies) and the SDK's batch processor exports on
a thread of its own, so a slow or dead collector costs a check nothing. A full queue drops events and
counts them; it never waits.

Only the guard server imports this module, and only once the export is switched on.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.resources import Resource

from breaker import __version__
from breaker.jobs import DecisionJob
from breaker.worker import QueueWorker

__all__ = ["EVENT", "MAX_PENDING", "SCHEMA_URL", "DecisionExporter", "attributes"]

# The GenAI conventions followed: the open-telemetry/semantic-conventions-genai registry, schema 1.42.0.
SCHEMA_URL = "https://opentelemetry.io/schemas/gen-ai/1.42.0"
EVENT = "gen_ai.evaluation.result"
EVALUATION = "circuit_breaker"  # gen_ai.evaluation.name: the evaluation is the circuit breaker's
SERVICE = "cbconsole-guard"  # service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise
MAX_PENDING = 10_000  # denies waiting for our thread to build their records; more are dropped (and counted)
_SEVERITY = {"deny": (SeverityNumber.WARN, "WARN"), "warn": (SeverityNumber.INFO, "INFO")}


def attributes(job: DecisionJob) -> dict[str, Any]:
    """The event's attributes: the conventions' names where they have one, `cbconsole.*` for the rest."""
    out: dict[str, Any] = {
        "gen_ai.evaluation.name": EVALUATION,
        "gen_ai.evaluation.score.label": job.decision,
        "gen_ai.evaluation.explanation": job.text,
        "gen_ai.agent.id": job.agent,
        "gen_ai.tool.name": job.tool,
        "gen_ai.conversation.id": job.conversation,
        "cbconsole.rule": job.rule,
        "cbconsole.count": job.count,
        "cbconsole.limit": job.limit,
        "cbconsole.trip": job.first,
        "cbconsole.harness": job.harness,
    }
    if job.call_id is not None:
        out["gen_ai.tool.call.id"] = str(job.call_id)
    if job.parent is not None:
        out["cbconsole.agent.parent_id"] = job.parent
    return out


def _resource() -> Resource:
    """The OTEL_* variables' resource, with the guard's name, version and host where they say none."""
    base = Resource.create()
    extra: dict[str, Any] = {}
    if str(base.attributes.get("service.name", "")).startswith("unknown_service"):
        extra["service.name"] = SERVICE
    if "service.version" not in base.attributes:
        extra["service.version"] = __version__
    if "host.name" not in base.attributes:
        extra["host.name"] = socket.gethostname()
    return base.merge(Resource(extra))


class DecisionExporter:
    """Denies and warnings to an OTLP endpoint. `exporter`: where the batches go (by default OTLP/HTTP,
    configured by the OTEL_EXPORTER_OTLP_* variables)."""

    def __init__(self, exporter: LogRecordExporter | None = None) -> None:
        self.exporter = exporter if exporter is not None else OTLPLogExporter()
        self.endpoint = str(getattr(self.exporter, "_endpoint", type(self.exporter).__name__))
        self.provider = LoggerProvider(resource=_resource(), shutdown_on_exit=False)
        # The batch processor's queue, batch size and delay follow OTEL_BLRP_* (defaults 2048, 512, 1 s).
        self.provider.add_log_record_processor(BatchLogRecordProcessor(self.exporter))
        self.logger = self.provider.get_logger("cbconsole.guard", __version__, schema_url=SCHEMA_URL)
        # Our thread builds the records: about 30-60 us each, too much for the event loop in a flood of denies.
        self.worker: QueueWorker[DecisionJob] = QueueWorker("otel-events", self._build, limit=MAX_PENDING)

    @property
    def dropped(self) -> int:
        """Events the queue had no room for."""
        return self.worker.dropped

    def emit(self, job: DecisionJob) -> None:
        """Queue one event (on the event loop: no I/O, no SDK call)."""
        self.worker.put(job)

    def _build(self, jobs: list[DecisionJob]) -> None:
        for job in jobs:
            number, text = _SEVERITY[job.decision]
            self.logger.emit(
                timestamp=int(job.when * 1e9),
                severity_number=number,
                severity_text=text,
                attributes=attributes(job),
                event_name=EVENT,
            )
            time.sleep(0)  # hand the interpreter back: the event loop waits at most one record for it

    def flush(self, timeout_millis: int = 5_000) -> bool:
        """Every event queued so far built and exported (blocking)."""
        return self.worker.flush(timeout_millis / 1000) and self.provider.force_flush(timeout_millis)

    def close(self) -> None:
        """Export what is queued and stop (blocking: call it from a thread)."""
        self.worker.close()
        self.provider.shutdown()
