"""Every benchmark in tests/bench/ still runs and prints the lines it promises (median, p99, ratio to
its baseline). Each runs once, with `--quick` (tiny sizes: seconds, not a measurement); the figures
themselves are never asserted — they go in docs, measured on a quiet machine without `--quick`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "bench"

_MS_ROW = r"median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+baseline median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+ratio\s+[\d.]+x"

PROMISES = {
    "bench_adversarial.py": [
        r"baseline\s+checks\s+\d+\s+median [\d.]+ ms\s+p99 [\d.]+ ms\s+failure mode \d+ \([\d.]+%\)",
        r"under attack\s+checks\s+\d+\s+median [\d.]+ ms\s+p99 [\d.]+ ms\s+failure mode \d+",
        r"ratio \(p99 under attack / baseline p99\): [\d.]+x",
        r"operators: \d+ config writes acknowledged, \d+ lost",
    ],
    "bench_engine.py": [
        r"median\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+baseline\s+[\d.]+ us\s+ratio\s+[\d.]+x",
        r"typical 3-key search \(allowed\)\s+median.*\(target <= 5x: (target met|NOT met)\)",
        r"1,000 agents interleaved \(allowed\)\s+median.*\(target <= 8x: (target met|NOT met)\)",
        r"memory \[recommended\]:.* bytes per remembered call .*\(target <= 120: (target met|NOT met)\)",
    ],
    "bench_reload.py": [r"median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+ratio\s+[\d.]+x"],
    "bench_protocol.py": [
        rf"{re.escape(case)}: median\s+[\d.]+ (us|ms)\s+p99\s+[\d.]+ (us|ms)\s+baseline .* ratio\s+[\d.]+x"
        for case in (
            "check frame decoded (decode_request)",
            "check answered in process (ServerSession)",
            "state frame of 100 agents read (StateFrame.from_json)",
        )
    ],
    "bench_console.py": [
        r"guard check with console:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us .* ratio p99\s+[\d.]+x",
        r"console event-loop lag:.*max\s+[\d.]+ ms",
        r"key-press to screen:\s+median\s+[\d.]+ ms\s+p95\s+[\d.]+ ms",
        r"drill-down on [\d,]+ calls/s: guard check p50\s+[\d.]+ us\s+p99\s+[\d.]+ us .* ratio p99 .*\s+[\d.]+x",
        r"drill-down event-loop lag:.*max\s+[\d.]+ ms",
    ],
    "bench_console_scale.py": [
        r"\b20 agents: key-press to screen\s+median\s+[\d.]+ ms\s+p95\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+ratio\s+[\d.]+x",
        r"\b200 agents: key-press to screen\s+median\s+[\d.]+ ms\s+p95\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+ratio\s+[\d.]+x",
        r"\b20 agents: console RSS\s+[\d.]+ MiB\s+peak\s+[\d.]+ MiB\s+baseline\s+[\d.]+ MiB\s+ratio\s+[\d.]+x",
        r"\b200 agents: console RSS\s+[\d.]+ MiB\s+peak\s+[\d.]+ MiB\s+baseline\s+[\d.]+ MiB\s+ratio\s+[\d.]+x",
        r"\b200 agents: event-loop lag\s+median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+max\s+[\d.]+ ms",
    ],
    "bench_fleet.py": [
        r"guard with\s+0 follower\(s\): check p50\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+ratio p99\s+[\d.]+x",
        r"guard with\s+2 follower\(s\): check p50\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+ratio p99\s+[\d.]+x .*frames/s",
        r"console over 2 guard\(s\), [\d,]+ agents: RSS\s+[\d.]+ MiB .* key press median\s+[\d.]+ ms p95\s+[\d.]+ ms"
        r"\s+ratio\s+[\d.]+x",
    ],
    "bench_state.py": [
        r"check, state kept:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us",
        r"ratio p50\s+[\d.]+x\s+p99\s+[\d.]+x",
        r"check, console attached: p50\s+[\d.]+ us\s+p99\s+[\d.]+ us",
        r"agents, every call twice \(100 previews\)\s*: file\s+[\d.]+ MiB; last records\s+[\d.]+ MiB "
        r"\(\s*[\d,]+ bytes per agent\)",
    ],
    "bench_server.py": [
        r"echo p50\s+[\d.]+ us p99\s+[\d.]+ us .*"
        r"guard check p50\s+[\d.]+ us p99\s+[\d.]+ us\s+[\d,]+ checks/s \| ratio p50\s+[\d.]+x",
        r"guard RSS: [\d.]+ MiB idle, [\d.]+ MiB with",
    ],
    "bench_metrics.py": [
        r"check, metrics off:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us",
        r"check, metrics on:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+\| ratio p50\s+[\d.]+x\s+p99\s+[\d.]+x",
        r"check, metrics on, scraped every [\d.]+ s:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+\| ratio p50\s+[\d.]+x",
        r"paired rounds: median of each round's p50 ratio to off: metrics on\s+[\d.]+x, scraped\s+[\d.]+x",
        r"scrape: median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+[\d,]+ bytes\s+\d+ series",
        r"guard CPU per check: metrics off\s+[\d.]+ us, on\s+[\d.]+ us",
        r"denied check, export on:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+\| ratio p50\s+[\d.]+x",
        r"guard RSS: [\d.]+ MiB before, [\d.]+ MiB with [\d,]+ more agents .* KiB per agent",
    ],
    "bench_hook.py": [
        *(
            rf"{re.escape(case)}\s+{_MS_ROW}"
            for case in (
                "--socket, allowed",
                "--socket, denied",
                "$XDG_RUNTIME_DIR, allowed",
                "temp dir default, allowed",
            )
        ),
        r"pre-execute \+ guard\s+median\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+baseline median.*added median\s+-?[\d.]+ us",
    ],
    "bench_integrations.py": [
        rf"{name}\s+per call: {_MS_ROW}"
        for name in ("langgraph", "openai-agents", "pydantic-ai", "smolagents", "crewai")
    ],
    "bench_recent.py": [
        r"recent calls, [\d,]+ agents: [\d,]+ bytes an agent as the tick keeps them \([\d.]+ MiB\), [\d,]+ bytes",
        r"check median [\d.]+ us; the tick per call it turns median [\d.]+ us p99 [\d.]+ us; ratio to a check [\d.]+x",
    ],
    "bench_replay.py": [
        r"median\s+[\d.]+ us/call\s+p99\s+[\d.]+ us/call\s+= [\d,]+k calls/s",
        r"bare loop over the parsed calls\s+median\s+[\d.]+ us/call\s+ratio\s+[\d.]+x",
        r"read \+ parse\s+median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms.*ratio\s+[\d.]+x",
    ],
}


def test_every_benchmark_has_a_smoke_run():
    assert sorted(PROMISES) == sorted(p.name for p in BENCH.glob("bench_*.py"))


# The `slow` tier: the smoke runs that take 5 s or more here (the rest stay in the fast tier). Two run what is
# installed into the cache: the hook's benchmark the dsh plugin in Node 22, the frameworks' each framework.
SLOW = {"bench_adversarial.py", "bench_console.py", "bench_console_scale.py", "bench_fleet.py", "bench_state.py"}
MARKS = {name: [pytest.mark.slow] for name in SLOW} | {
    "bench_hook.py": [pytest.mark.e2e("node")],
    "bench_integrations.py": [pytest.mark.frameworks],
}


def run_bench(script: str, tmp_path: Path) -> str:
    """The benchmark's output once it has ended. Its output goes to files, not pipes, and its process group is
    killed when it ends: a guard it started and left behind (a benchmark that died early) can neither hold the
    run open nor outlive it; a benchmark that failed fails the test at once, with what it wrote."""
    with open(tmp_path / "out", "w+b") as out, open(tmp_path / "err", "w+b") as err:
        proc = subprocess.Popen(
            [sys.executable, str(BENCH / script), "--quick"], stdout=out, stderr=err, start_new_session=True
        )
        try:
            code = proc.wait(timeout=240)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    assert code == 0, f"{script} --quick exited {code}:\n{stdout}\n{stderr[-4000:]}"
    return stdout


@pytest.mark.parametrize("script", [pytest.param(name, marks=MARKS.get(name, [])) for name in sorted(PROMISES)])
def test_benchmark_runs_quick_and_prints_the_figures_it_promises(script, tmp_path):
    out = run_bench(script, tmp_path)
    for pattern in PROMISES[script]:
        assert re.search(pattern, out), (pattern, out)
