"""The OpenTelemetry export of denies and warnings: what each event says (the SDK's in-memory exporter), the
real OTLP/HTTP exporter of a real guard against a receiver in the test that decodes the protobuf, and a
collector that never answers costing the checks nothing."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from breaker import Config
from breaker.client import GuardClient
from breaker.engine import Guard
from breaker.jobs import DecisionJob
from breaker.otel import EVENT, SCHEMA_URL, DecisionExporter, attributes
from breaker.session import ServerSession
from tests.metricskit import stats
from tests.sessionkit import settle
from tests.waits import eventually

RECOMMENDED = "- id: circuit-breaker\n  config: {preset: recommended}\n"


def session_jobs(config: Config, frames: list[bytes]) -> list[DecisionJob]:
    session = ServerSession(Guard(config), clock=lambda: 1_700_000_000.0, owner_uid=1, pid=2)
    session.export_decisions = True
    ch = session.open("harness", 1, 3)
    for frame in frames:
        session.receive(ch, frame)
    jobs = [j for j in session.jobs if isinstance(j, DecisionJob)]
    settle(session)
    return jobs


def check(i: int, agent: str, **extra: object) -> bytes:
    import orjson

    return (
        orjson.dumps({"op": "check", "id": i, "agent": agent, "tool": "web_search", "args": {"q": 1}, **extra}) + b"\n"
    )


def test_each_deny_and_warning_becomes_one_evaluation_event_with_the_conventions_names():
    frames = [check(i, "sub-1", harness="claude-code", parent="session-1", call_id=f"c{i}") for i in range(4)]
    jobs = session_jobs(Config.with_preset("recommended"), frames)
    assert [(j.decision, j.rule) for j in jobs] == [("warn", "repeat"), ("deny", "repeat"), ("deny", "repeat")]
    memory = InMemoryLogRecordExporter()
    exporter = DecisionExporter(memory)
    for job in jobs:
        exporter.emit(job)
    assert exporter.flush()
    records = [r.log_record for r in memory.get_finished_logs()]
    assert [r.event_name for r in records] == [EVENT] * 3
    assert [r.severity_text for r in records] == ["INFO", "WARN", "WARN"]
    warn, deny, again = (dict(r.attributes or {}) for r in records)
    assert deny == {
        gen_ai.GEN_AI_EVALUATION_NAME: "circuit_breaker",
        gen_ai.GEN_AI_EVALUATION_SCORE_LABEL: "deny",
        gen_ai.GEN_AI_EVALUATION_EXPLANATION: jobs[1].text,
        gen_ai.GEN_AI_AGENT_ID: "sub-1",
        gen_ai.GEN_AI_TOOL_NAME: "web_search",
        gen_ai.GEN_AI_TOOL_CALL_ID: "c2",
        gen_ai.GEN_AI_CONVERSATION_ID: "session-1",
        "cbconsole.rule": "repeat",
        "cbconsole.count": 2,
        "cbconsole.limit": 2,
        "cbconsole.trip": True,
        "cbconsole.harness": "claude-code",
        "cbconsole.agent.parent_id": "session-1",
    }
    assert "denied" in deny[gen_ai.GEN_AI_EVALUATION_EXPLANATION]
    assert warn[gen_ai.GEN_AI_EVALUATION_SCORE_LABEL] == "warn" and warn["cbconsole.trip"] is False
    assert again["cbconsole.trip"] is False  # only the first deny of a kind is a trip
    assert records[0].timestamp == 1_700_000_000 * 10**9
    resource = memory.get_finished_logs()[0].resource.attributes
    assert resource["service.name"] == "cbconsole-guard" and resource["host.name"] == socket.gethostname()
    assert memory.get_finished_logs()[0].instrumentation_scope.schema_url == SCHEMA_URL
    exporter.close()


def test_every_attribute_outside_the_conventions_is_under_cbconsole():
    (job,) = session_jobs(Config(duplicate_limit=1), [check(0, "a"), check(1, "a")])
    known = {getattr(gen_ai, n) for n in dir(gen_ai) if n.startswith("GEN_AI_") and isinstance(getattr(gen_ai, n), str)}
    for key in attributes(job):
        assert key in known or key.startswith("cbconsole."), key


def test_the_conversation_is_the_top_of_the_parent_chain():
    frames = [
        check(0, "root", call_id=0),
        check(1, "child", parent="root"),
        check(2, "grandchild", parent="child"),
        check(3, "grandchild", parent="child"),
        check(4, "loner"),
        check(5, "loner"),
    ]
    jobs = session_jobs(Config(duplicate_limit=1), frames)
    assert [(j.agent, j.conversation) for j in jobs] == [("grandchild", "root"), ("loner", "loner")]
    assert "gen_ai.tool.call.id" not in attributes(jobs[1])


def test_nothing_is_queued_for_export_while_it_is_off():
    session = ServerSession(Guard(Config(duplicate_limit=1)), clock=lambda: 0.0, owner_uid=1)
    ch = session.open("harness", 1, 3)
    session.receive(ch, check(0, "a") + check(1, "a"))
    assert not [j for j in session.jobs if isinstance(j, DecisionJob)]


# -- a real guard, the real OTLP/HTTP exporter, a receiver in the test ---------------------------------------


class Receiver:
    """An OTLP/HTTP logs endpoint on loopback that decodes each request with opentelemetry-proto."""

    def __init__(self) -> None:
        self.requests: list[ExportLogsServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportLogsServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                reply = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[tuple[str, dict, dict]]:
        """(event name, attributes, resource attributes) of every log record received."""
        out = []
        for request in list(self.requests):
            for rl in request.resource_logs:
                resource = {a.key: _any(a.value) for a in rl.resource.attributes}
                for sl in rl.scope_logs:
                    for record in sl.log_records:
                        out.append((record.event_name, {a.key: _any(a.value) for a in record.attributes}, resource))
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _any(value) -> object:
    return getattr(value, value.WhichOneof("value"))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def otel_env(monkeypatch):
    def use(endpoint: str, **more: str) -> None:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "100")  # ms: the batch goes out soon after
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=ci")
        for key, value in more.items():
            monkeypatch.setenv(key, value)

    return use


def test_a_real_guard_exports_its_denies_and_warnings_over_otlp_http(guard_factory, receiver, otel_env):
    otel_env(receiver.url)
    g = guard_factory("--otel", patch_text=RECOMMENDED)
    assert stats(g)["otel_events"] is True and stats(g)["otel_error"] is None
    with GuardClient(g.socket, harness="dsh", timeout=30) as client:
        decisions = [client.check("agent-7", "web_search", {"q": "x"}, parent="root-1").allowed for _ in range(3)]
    assert decisions == [True, True, False]
    events = eventually(
        lambda: receiver.events() if len(receiver.events()) >= 2 else None, timeout=30, what="two events"
    )
    assert [(name, a["gen_ai.evaluation.score.label"]) for name, a, _ in events] == [(EVENT, "warn"), (EVENT, "deny")]
    _, deny, resource = events[1]
    assert deny["gen_ai.agent.id"] == "agent-7" and deny["gen_ai.conversation.id"] == "root-1"
    assert deny["gen_ai.tool.name"] == "web_search" and deny["cbconsole.rule"] == "repeat"
    assert deny["cbconsole.harness"] == "dsh" and deny["cbconsole.trip"] is True
    assert resource["service.name"] == "cbconsole-guard" and resource["deployment.environment.name"] == "ci"
    assert g.stop() == 0


def test_the_setting_switches_the_export_on_and_off_live(guard_factory, receiver, otel_env):
    otel_env(receiver.url)
    g = guard_factory(patch_text="- id: circuit-breaker\n  config: {duplicateLimit: 1}\n")
    assert stats(g)["otel_events"] is False
    g.patch.write_text("- id: circuit-breaker\n  config: {duplicateLimit: 1, otelEvents: true}\n")
    eventually(lambda: stats(g)["otel_events"], what="the export to start")
    with GuardClient(g.socket, timeout=30) as client:
        assert [client.check("a", "t", {}).allowed for _ in range(2)] == [True, False]
    eventually(lambda: receiver.events(), timeout=30, what="an event")
    g.patch.write_text("- id: circuit-breaker\n  config: {duplicateLimit: 1}\n")
    eventually(lambda: stats(g)["otel_events"] is False, what="the export to stop")
    with GuardClient(g.socket, timeout=30) as client:
        assert [client.check("while-off", "t", {}).allowed for _ in range(2)] == [True, False]
    g.patch.write_text("- id: circuit-breaker\n  config: {duplicateLimit: 1, otelEvents: true}\n")
    eventually(lambda: stats(g)["otel_events"], what="the export to start again")
    with GuardClient(g.socket, timeout=30) as client:
        assert [client.check("after", "t", {}).allowed for _ in range(2)] == [True, False]
    events = eventually(
        lambda: [e for e in receiver.events() if e[1]["gen_ai.agent.id"] == "after"] and receiver.events()
    )
    assert [e[1]["gen_ai.agent.id"] for e in events] == ["a", "after"]  # nothing of the deny while it was off


def test_a_collector_that_never_answers_costs_the_checks_nothing(guard_factory, otel_env):
    with socket.socket() as dead:  # accepts connections (the kernel's backlog) and never reads or answers
        dead.bind(("127.0.0.1", 0))
        dead.listen(1)
        otel_env(f"http://127.0.0.1:{dead.getsockname()[1]}", OTEL_EXPORTER_OTLP_TIMEOUT="30")
        g = guard_factory("--otel", patch_text="- id: circuit-breaker\n  config: {duplicateLimit: 1}\n")
        answered = 0
        with GuardClient(g.socket, timeout=5.0) as client:
            for i in range(600):  # 300 agents, each allowed once and denied once: 300 events
                verdict = client.check(f"agent-{i // 2}", "t", {})
                answered += verdict.allowed == (i % 2 == 0)
        assert answered == 600
        assert stats(g)["checks"] == 600
        started = time.monotonic()
        assert g.stop() == 0
        assert time.monotonic() - started < 14  # the stop waits at most 3 s for the export


def test_otel_without_the_sdk_installed_is_a_clear_error(guard_factory, tmp_path: Path, monkeypatch):
    shadow = tmp_path / "no-otel" / "opentelemetry"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'opentelemetry'\", name='opentelemetry')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    g = guard_factory("--otel", start=False)
    g.start(wait=False)
    assert g.proc is not None and g.proc.wait(30) == 1
    assert "pip install 'cbconsole[otel]'" in g.log.read_text() and "(--otel)" in g.log.read_text()
    running = guard_factory(patch_text="- id: circuit-breaker\n  config: {otelEvents: true}\n")
    error = eventually(lambda: stats(running)["otel_error"])
    assert "the otelEvents setting" in error and "pip install 'cbconsole[otel]'" in error
    with GuardClient(running.socket, timeout=30) as client:
        assert client.check("a", "t", {}).allowed
