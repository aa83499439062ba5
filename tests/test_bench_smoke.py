"""The benchmarks still run (with --quick) and print what they promise; their figures are not asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "bench"

PROMISES = {
    "bench_engine.py": [
        r"median\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+baseline\s+[\d.]+ us\s+ratio\s+[\d.]+x",
        r"bytes per remembered call",
    ],
    "bench_reload.py": [r"median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+ratio\s+[\d.]+x"],
    "bench_console.py": [
        r"guard check with console:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us .* ratio p99\s+[\d.]+x",
        r"console event-loop lag:.*max\s+[\d.]+ ms",
        r"key-press to screen:\s+median\s+[\d.]+ ms\s+p95\s+[\d.]+ ms",
    ],
    "bench_state.py": [
        r"check, state kept:\s+p50\s+[\d.]+ us\s+p99\s+[\d.]+ us",
        r"ratio p50\s+[\d.]+x\s+p99\s+[\d.]+x",
        r"check, console attached: p50\s+[\d.]+ us\s+p99\s+[\d.]+ us",
    ],
    "bench_server.py": [
        r"echo p50\s+[\d.]+ us p99\s+[\d.]+ us .*"
        r"guard check p50\s+[\d.]+ us p99\s+[\d.]+ us\s+[\d,]+ checks/s \| ratio p50\s+[\d.]+x",
        r"guard RSS: [\d.]+ MiB idle, [\d.]+ MiB with",
    ],
}


@pytest.mark.parametrize("script", sorted(PROMISES))
def test_benchmark_runs_and_prints_median_p99_and_ratio(script):
    out = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick"], capture_output=True, text=True, timeout=240, check=True
    ).stdout
    for pattern in PROMISES[script]:
        assert re.search(pattern, out), (pattern, out)
