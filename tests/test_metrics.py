"""The guard's Prometheus metrics, read from a real guard process over real HTTP: what they count, that
their labels stay bounded, where they are served (the flag, the setting, a reload), and that nothing on
the endpoint changes the guard."""

from __future__ import annotations

import re
import select
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from breaker.client import GuardClient
from breaker.metrics import MAX_SCRAPES, STALE, GuardCollector, MetricsServer, MetricsView
from breaker.tally import BUCKETS, HARNESS_LABELS, Tally, harness_label
from tests.conftest import ROOT, Conn, request
from tests.metricskit import (
    free_port,
    http,
    metrics_url,
    names,
    parse,
    scrape,
    scrape_text,
    scrape_until,
    stats,
    value,
)
from tests.waits import eventually

# What a guard serves, its own names (process_* and python_info come from prometheus-client's collectors).
GUARD_METRICS = {
    "cbconsole_build_info",
    "cbconsole_checks_total",
    "cbconsole_denies_total",
    "cbconsole_trips_total",
    "cbconsole_warnings_total",
    "cbconsole_agents",
    "cbconsole_interrupted_agents",
    "cbconsole_connections",
    "cbconsole_check_duration_seconds_bucket",
    "cbconsole_check_duration_seconds_sum",
    "cbconsole_check_duration_seconds_count",
    "cbconsole_config_reloads_total",
    "cbconsole_config_last_reload_successful",
    "cbconsole_paused",
    "cbconsole_enabled",
    "cbconsole_state_save_successful",
    "cbconsole_incident_lines_dropped_total",
    "cbconsole_interrupt_commands_dropped_total",
}


def loop(path, agent: str, n: int, harness: str = "claude-code", tool: str = "web_search") -> list[bool]:
    with GuardClient(path, harness=harness, timeout=30) as client:
        return [client.check(agent, tool, {"q": "the same query"}).allowed for _ in range(n)]


def test_metrics_are_off_by_default(guard):
    assert stats(guard)["metrics"] == "" and stats(guard)["metrics_error"] is None


def test_a_guard_without_metrics_or_export_imports_neither_library():
    script = (
        "import asyncio, os, sys, tempfile\n"
        "from pathlib import Path\n"
        "from breaker.client import AsyncGuardClient\n"
        "from breaker.server import GuardServer\n"
        "async def main():\n"
        "    d = Path(tempfile.mkdtemp()); os.chmod(d, 0o700); (d / 'run').mkdir(mode=0o700)\n"
        "    g = GuardServer(d / 'run' / 'g.sock', state_path=None)\n"
        "    await g.start()\n"
        "    async with AsyncGuardClient(d / 'run' / 'g.sock', timeout=30) as c:\n"
        "        for _ in range(8):\n"
        "            await c.check('a', 'web_search', {'q': 1})\n"
        "    await g.stop()\n"
        "asyncio.run(main())\n"
        "roots = ('prometheus_client', 'opentelemetry', 'breaker.metrics', 'breaker.otel')\n"
        "print(sorted(m for m in sys.modules if m.startswith(roots)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_loop_shows_in_checks_denies_and_trips_by_kind(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0")
    url = metrics_url(g)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert loop(g.socket, "looper", 9) == [True] * 6 + [False] * 3
    s = scrape_until(url, lambda s: value(s, "cbconsole_trips_total", kind="duplicate") == 1)
    assert value(s, "cbconsole_checks_total", harness="claude-code", decision="allow") == 6
    assert value(s, "cbconsole_checks_total", harness="claude-code", decision="deny") == 3
    assert value(s, "cbconsole_checks_total", harness="claude-code", decision="warn") == 0
    assert value(s, "cbconsole_denies_total", kind="duplicate") == 3
    assert value(s, "cbconsole_denies_total", kind="cap") == 0  # every kind is there from the start, at 0
    assert value(s, "cbconsole_trips_total", kind="cap") == 0
    assert value(s, "cbconsole_agents") == 1
    assert value(s, "cbconsole_build_info", version="0.1.0", protocol="1") == 1
    assert GUARD_METRICS <= names(s)
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_start_time_seconds"} <= names(s)


def test_warnings_and_interrupts_are_counted(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0", patch_text="- id: circuit-breaker\n  config: {preset: recommended}\n")
    url = metrics_url(g)
    assert loop(g.socket, "warned", 3) == [True, True, False]  # recommended: the 2nd in a row warns, the 3rd denies
    assert request_op(g, {"op": "interrupt", "id": 5, "agent": "stopped", "reason": "test"})["ok"]
    assert loop(g.socket, "stopped", 1) == [False]
    s = scrape_until(url, lambda s: value(s, "cbconsole_trips_total", kind="interrupted") == 1)
    assert value(s, "cbconsole_warnings_total", rule="repeat") == 1
    assert value(s, "cbconsole_checks_total", harness="claude-code", decision="warn") == 1
    assert value(s, "cbconsole_trips_total", kind="repeat") == 1
    assert value(s, "cbconsole_interrupted_agents") == 1


def request_op(g, message):
    return request(g.operator, message)


def test_harness_labels_are_bounded_and_no_label_names_an_agent_or_a_tool(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0")
    url = metrics_url(g)
    agents = [f"agent-{uuid.uuid4().hex}" for _ in range(3)]
    loop(g.socket, agents[0], 2, harness="dsh", tool="tool_x_" + uuid.uuid4().hex)
    for n in range(5):  # five made-up harness names: one label between them
        loop(g.socket, agents[1] + str(n), 1, harness=f"made-up-{uuid.uuid4().hex}")
    raw = Conn(g.socket)  # no hello, no harness field: "unknown"
    assert raw.ask({"op": "check", "id": 1, "agent": agents[2], "tool": "t", "args": {}})["decision"] == "allow"
    raw.close()
    s = scrape_until(url, lambda s: value(s, "cbconsole_checks_total", harness="unknown", decision="allow") == 1)
    harnesses = {dict(labels)["harness"] for name, labels in s if name == "cbconsole_checks_total"}
    assert harnesses == {"dsh", "other", "unknown"}
    assert value(s, "cbconsole_checks_total", harness="other", decision="allow") == 5
    label_values = {v for _name, labels in s for _k, v in labels}
    assert not any(a in v or "tool_x_" in v or "made-up" in v for a in agents for v in label_values)


def test_every_check_is_timed_once_in_the_histogram(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0")
    url = metrics_url(g)
    loop(g.socket, "a", 12)
    loop(g.socket, "b", 3, harness="codex")
    s = scrape_until(url, lambda s: value(s, "cbconsole_check_duration_seconds_count") == 15)
    checks = sum(v for (name, _), v in s.items() if name == "cbconsole_checks_total")
    assert checks == 15
    buckets = sorted(
        (float(dict(labels)["le"]), v) for (name, labels), v in s.items() if name.endswith("_seconds_bucket")
    )
    assert [b for b, _ in buckets] == [*BUCKETS, float("inf")]
    assert [v for _, v in buckets] == sorted(v for _, v in buckets) and buckets[-1][1] == 15  # cumulative
    assert 0 < value(s, "cbconsole_check_duration_seconds_sum") < 15


def test_a_port_in_use_stops_the_guard_with_a_clear_error(guard_factory):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        g = guard_factory("--metrics", f"127.0.0.1:{port}", start=False)
        g.start(wait=False)
        assert g.proc is not None and g.proc.wait(20) == 1
    log = g.log.read_text()
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use (--metrics)" in log
    assert not g.socket.exists()


def test_a_malformed_flag_is_refused_before_the_guard_starts():
    out = subprocess.run(
        [sys.executable, "-m", "breaker.cli", "--headless", "--metrics", "localhost"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "--metrics: expected HOST:PORT, [IPv6]:PORT or PORT, found 'localhost'" in out.stderr


def _layer(metrics: str) -> str:
    return f'- id: circuit-breaker\n  config:\n    metrics: "{metrics}"\n'


def test_the_setting_starts_moves_and_stops_the_metrics_on_reload(guard_factory):
    g = guard_factory(patch_text=_layer("127.0.0.1:0"))
    first = metrics_url(g)
    assert scrape(first)
    port = free_port()
    g.patch.write_text(_layer(f"127.0.0.1:{port}"))
    moved = eventually(lambda: stats(g)["metrics"] if f":{port}/" in stats(g)["metrics"] else None)
    assert scrape(moved) and http(moved)[0] == 200
    with pytest.raises(OSError):
        scrape(first)  # the old address is given up
    g.patch.write_text(_layer(""))
    eventually(lambda: stats(g)["metrics"] == "", what="the metrics to stop")
    with pytest.raises(OSError):
        scrape(moved)
    assert loop(g.socket, "still-guarded", 7)[-1] is False


def test_a_setting_on_a_busy_port_is_reported_and_the_guard_runs_on(guard_factory):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        g = guard_factory(patch_text=_layer(f"127.0.0.1:{port}"))
        error = eventually(lambda: stats(g)["metrics_error"])
        assert error == f"cannot serve metrics on 127.0.0.1:{port}: Address already in use (the metrics setting)"
        assert stats(g)["metrics"] == ""
        assert loop(g.socket, "a", 7)[-1] is False
    g.patch.write_text(_layer("127.0.0.1:0"))  # fixed at the next reload that changes it
    assert scrape(metrics_url(g))
    assert stats(g)["metrics_error"] is None


def test_the_flag_wins_over_the_setting_for_the_whole_run(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0", patch_text=_layer(""))
    url = metrics_url(g)
    other = f"127.0.0.1:{free_port()}"
    g.patch.write_text(_layer(other))
    eventually(lambda: request_op(g, {"op": "config_get", "id": 2})["config"]["values"]["metrics"] == other)
    assert stats(g)["metrics"] == url and scrape(url)


def test_the_endpoint_is_read_only(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0")
    url = metrics_url(g)
    loop(g.socket, "a", 2)
    before = stats(g)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, _ = http(url, method, data=b'{"op":"pause"}')
        assert status == 405, method
    assert http(url.replace("/metrics", "/pause"))[0] == 404
    assert http(url.replace("/metrics", "/"))[0] == 404
    after = stats(g)
    assert (after["paused"], after["checks"], after["agents"]) == (before["paused"], before["checks"], before["agents"])


def test_checks_are_answered_while_idle_connections_hold_the_metrics_port(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0")
    host, port = metrics_url(g).split("//")[1].split("/")[0].rsplit(":", 1)
    idle = [socket.create_connection((host, int(port))) for _ in range(20)]  # never send a request
    try:
        assert loop(g.socket, "a", 50).count(True) == 6
    finally:
        for s in idle:
            s.close()


class Dribbler:
    """A client that sends a request one byte every `every` seconds (never finishing it) from a thread of
    its own, until the server closes the connection (`closed` is set) or `stop()`."""

    def __init__(self, host: str, port: int, every: float) -> None:
        self.sock = socket.create_connection((host, port))
        self.every = every
        self.sent = 0
        self.closed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100_000
        for byte in request:
            try:
                self.sock.send(bytes([byte]))
                self.sent += 1
                ready, _, _ = select.select([self.sock], [], [], self.every)
                if ready and not self.sock.recv(1024):
                    break  # the server shut it (it never answers part of a request)
            except OSError:
                break
            if self._stop.is_set():
                return
        self.closed.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sock.close()


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    return host, int(port)


def test_a_scrape_is_answered_while_slow_clients_dribble_into_every_slot(guard_factory):
    g = guard_factory("--metrics", "127.0.0.1:0")
    url = metrics_url(g)
    loop(g.socket, "a", 1)
    allowed = {"harness": "claude-code", "decision": "allow"}
    scrape_until(url, lambda s: value(s, "cbconsole_checks_total", **allowed) == 1)
    dribblers = [Dribbler(*_host_port(url), every=1.0) for _ in range(MAX_SCRAPES)]  # one per slot
    try:
        eventually(lambda: all(d.sent >= 2 for d in dribblers), what="every dribbler to send its bytes")
        samples = parse(scrape_text(url, timeout=60))  # one scrape, waited for: it is answered, not closed
        assert value(samples, "cbconsole_checks_total", **allowed) == 1
        assert sum(not d.closed.is_set() for d in dribblers) >= MAX_SCRAPES - 1  # the rest still dribbling
    finally:
        for d in dribblers:
            d.stop()


def test_a_client_dribbling_its_request_is_cut_at_the_request_deadline():
    collector = GuardCollector()
    collector.view = _view(time.monotonic())
    server = MetricsServer("127.0.0.1:0", collector, request_deadline=1.0)
    dribblers = [Dribbler(*_host_port(server.url), every=0.1) for _ in range(2)]
    try:
        for d in dribblers:
            assert d.closed.wait(30), "a client sending a byte every 0.1 s was never cut"
        assert all(d.sent > 1 for d in dribblers)
        collector.view = _view(time.monotonic())
        assert value(scrape(server.url), "cbconsole_agents") == 1  # the slots are free again
    finally:
        for d in dribblers:
            d.stop()
        server.close()


# -- the collector and the server in process -----------------------------------------------------------


def _view(taken: float) -> MetricsView:
    tally = Tally(("duplicate",), ("duplicate",))
    tally.row("dsh")[0] += 1
    return MetricsView(taken, tally.copy(), 1, 0, (("harness", 1),), False, True, 1, 0, True, None, 0, 0)


def test_a_scrape_fails_with_503_while_the_event_loop_publishes_nothing_fresh():
    now = [100.0]
    collector = GuardCollector(clock=lambda: now[0])
    server = MetricsServer("127.0.0.1:0", collector)
    try:
        status, body = http(server.url)
        assert status == 503 and "has not published" in body
        collector.view = _view(100.0)
        assert value(scrape(server.url), "cbconsole_checks_total", harness="dsh", decision="allow") == 1
        now[0] += STALE + 1
        status, body = http(server.url)
        assert status == 503 and "has not published its counts for 6 s" in body
    finally:
        server.close()


def test_a_closed_metrics_server_frees_its_port():
    server = MetricsServer("127.0.0.1:0", GuardCollector())
    port = server.httpd.server_port
    server.close()
    again = MetricsServer(f"127.0.0.1:{port}", GuardCollector())
    again.close()


def test_harness_names_map_to_a_bounded_set_of_labels():
    assert [harness_label(h) for h in HARNESS_LABELS] == list(HARNESS_LABELS)
    assert harness_label("") == "unknown"
    assert {harness_label(f"x{i}") for i in range(100)} == {"other"}
    tally = Tally(("cap",), ())
    rows = [tally.row(f"made-up-{i}") for i in range(100)]
    assert all(r is rows[0] for r in rows) and tally.rows == {} and list(tally.labels) == ["other"]


def test_the_tally_copy_is_not_changed_by_later_counts():
    tally = Tally(("cap",), ("cap",))
    tally.row("dsh")[3] += 1
    tally.observe(3e-6)
    tally.observe(1.0)
    copy = tally.copy()
    tally.row("dsh")[3] += 1
    tally.observe(1e-4)
    assert copy.checks == (("dsh", (0, 0, 0, 1)),)
    assert copy.buckets[0] == 1 and copy.buckets[-1] == 1 and sum(copy.buckets) == 2


def test_the_docs_metrics_table_is_what_a_guard_serves(guard_factory):
    text = (ROOT / "docs" / "metrics.md").read_text()
    table = text.split("<!-- metrics table:", 1)[1].split("<!-- end -->", 1)[0]
    documented = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    g = guard_factory("--metrics", "127.0.0.1:0")
    loop(g.socket, "a", 1)
    served = names(scrape_until(metrics_url(g), lambda s: "cbconsole_checks_total" in names(s)))
    families = {re.sub(r"_(bucket|sum|count)$", "", n) if "_duration_" in n else n for n in served}
    assert sorted(documented) == sorted(f for f in families if f.startswith("cbconsole_"))
