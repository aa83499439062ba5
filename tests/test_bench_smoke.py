"""The benchmarks still run (with --quick) and print what they promise; their figures are not asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "bench"


@pytest.mark.parametrize("script", ["bench_engine.py", "bench_reload.py"])
def test_benchmark_runs_and_prints_median_p99_and_ratio(script):
    out = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick"], capture_output=True, text=True, timeout=240, check=True
    ).stdout
    assert re.search(r"median\s+[\d.]+ \w+\s+p99\s+[\d.]+ \w+", out), out
    assert re.search(r"ratio\s+[\d.]+x", out), out
