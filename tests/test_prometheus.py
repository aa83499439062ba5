"""A real Prometheus (Debian's package) scraping a real guard; the shipped alert rules checked and unit-tested
by promtool; the Grafana dashboard's every query naming a metric the guard serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.metricskit import free_port, http, metrics_url, names, scrape, scrape_until
from tests.test_metrics import loop
from tests.waits import eventually

DOCS = ROOT / "docs"
ALERTS = DOCS / "alerts.yml"
DASHBOARD = DOCS / "grafana-dashboard.json"


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: .ci/run installs Debian's prometheus package (apt-get install prometheus)"
    return path


class Prometheus:
    """A private Prometheus on a free loopback port, with its own config and data directory."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.dir = tmp / "prometheus"
        (self.dir / "data").mkdir(parents=True)
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: ['{ALERTS}']\n"
            "scrape_configs:\n"
            "  - job_name: cbconsole\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = self.dir / "prometheus.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        for _attempt in range(3):  # the free port may be taken between choosing and binding it
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            self.proc = subprocess.Popen(
                [
                    tool("prometheus"),
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(self.log, "ab"),
            )
            try:  # up, or gone (the port was taken meanwhile: another one)
                eventually(lambda: self.proc.poll() is not None or self._up(), timeout=60, what="Prometheus up")
            except AssertionError:
                break  # running, never ready: its log says why
            if self.proc.poll() is None:
                return
        raise AssertionError(f"Prometheus did not start:\n{self.log.read_text()}")

    def _up(self) -> bool:
        try:
            return http(f"{self.url}/-/ready")[0] == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict]:
        status, body = http(f"{self.url}/api/v1/query?query={urllib.parse.quote(expr)}")
        assert status == 200, body
        return json.loads(body)["data"]["result"]

    def alerts(self) -> list[dict]:
        return json.loads(http(f"{self.url}/api/v1/alerts")[1])["data"]["alerts"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def prometheus_for(tmp_path):
    made: list[Prometheus] = []

    def make(target: str) -> Prometheus:
        p = Prometheus(tmp_path, target)
        made.append(p)
        p.start()
        return p

    yield make
    for p in made:
        p.stop()


@pytest.mark.needs("prometheus")
def test_prometheus_scrapes_a_guard_sees_the_trip_and_fires_the_loop_alert(guard_factory, prometheus_for):
    guard = guard_factory("--metrics", "127.0.0.1:0")
    target = metrics_url(guard).split("//", 1)[1].split("/", 1)[0]
    prom = prometheus_for(target)
    eventually(
        lambda: [r for r in prom.query('up{job="cbconsole"}') if r["value"][1] == "1"],
        timeout=60,
        what="a scrape of the guard",
        ignoring=(OSError, KeyError),
    )

    assert loop(guard.socket, "looper", 9, harness="codex") == [True] * 6 + [False] * 3

    def trip() -> list[dict]:
        return [r for r in prom.query('cbconsole_trips_total{kind="duplicate"}') if r["value"][1] == "1"]

    (row,) = eventually(trip, timeout=60, what="Prometheus to see the trip", ignoring=(OSError, KeyError))
    assert row["metric"]["job"] == "cbconsole" and row["metric"]["instance"] == target
    (denied,) = prom.query('cbconsole_checks_total{harness="codex",decision="deny"}')
    assert denied["value"][1] == "3"

    def firing() -> list[dict]:
        return [
            a for a in prom.alerts() if a["labels"]["alertname"] == "CbconsoleLoopTripped" and a["state"] == "firing"
        ]

    (alert,) = eventually(firing, timeout=60, what="the loop alert to fire", ignoring=(OSError, KeyError))
    assert alert["labels"]["kind"] == "duplicate" and alert["labels"]["instance"] == target

    guard.stop()
    eventually(
        lambda: [r for r in prom.query('up{job="cbconsole"}') if r["value"][1] == "0"],
        timeout=60,
        what="up to go to 0",
        ignoring=(OSError, KeyError),
    )


@pytest.mark.needs("promtool")
def test_the_alert_rules_pass_promtool_check():
    out = subprocess.run([tool("promtool"), "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 7 rules found" in out.stdout


@pytest.mark.needs("promtool")
def test_the_alert_rules_pass_their_promtool_unit_tests():
    out = subprocess.run(
        [tool("promtool"), "test", "rules", "alerts.test.yml"], cwd=DOCS, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@pytest.mark.needs("promtool")
def test_a_broken_alert_rule_unit_test_fails(tmp_path):
    """The unit tests can fail: the same file expecting another instance is refused."""
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    (tmp_path / "alerts.test.yml").write_text(
        (DOCS / "alerts.test.yml")
        .read_text()
        .replace(
            'instance: box:9464\n            exp_annotations:\n              summary: "The guard on box:9464 is down"',
            "instance: elsewhere:1\n            exp_annotations:\n"
            '              summary: "The guard on box:9464 is down"',
        )
    )
    out = subprocess.run(
        [tool("promtool"), "test", "rules", "alerts.test.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode != 0 and "CbconsoleGuardDown" in out.stdout + out.stderr


# -- every query names a metric the guard serves ---------------------------------------------------------

FUNCTIONS = {
    "sum",
    "count",
    "avg",
    "min",
    "max",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "label_values",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "humanize",
    "abs",
    "absent",
    "topk",
    "bottomk",
    "clamp_min",
    "clamp_max",
    "delta",
    "deriv",
    "time",
}
SYNTHETIC = {"up"}  # made by Prometheus for every target, not served by it


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, grouping lists, strings and
    variables taken out first)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\$\w+", "", text)
    text = re.sub(r"label_values\(([^,()]+),[^)]*\)", r"\1", text)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {w for w in words if w not in FUNCTIONS and not re.fullmatch(r"e\d*", w)}


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"] if isinstance(var["query"], dict) else var["query"])
    return exprs


def test_the_query_parser_finds_the_metrics_and_nothing_else():
    assert metric_names('sum by (kind) (increase(cbconsole_trips_total{job="cbconsole",kind=~"a|b"}[5m])) > 0') == {
        "cbconsole_trips_total"
    }
    assert metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(x_bucket[$__rate_interval]))) / on(instance) y"
    ) == {"x_bucket", "y"}
    assert metric_names('label_values(cbconsole_build_info{job="cbconsole"}, instance)') == {"cbconsole_build_info"}


def test_every_dashboard_and_alert_query_names_a_metric_the_guard_serves(guard_factory):
    guard = guard_factory("--metrics", "127.0.0.1:0")
    url = metrics_url(guard)
    loop(guard.socket, "a", 2)
    served = names(scrape_until(url, lambda s: "cbconsole_checks_total" in names(s))) | SYNTHETIC
    queries = dashboard_queries()
    assert len(queries) >= 15
    read = set().union(*(metric_names(q) for q in queries))
    assert read and read <= served, sorted(read - served)
    rules = re.findall(r"^\s+expr: (.+)$", ALERTS.read_text(), re.M)
    assert len(rules) == 7
    from_rules = set().union(*(metric_names(r) for r in rules))
    assert from_rules <= served, sorted(from_rules - served)
    assert scrape(url)
