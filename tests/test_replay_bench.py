"""bench_replay.py still runs (with --quick) and prints its figures; the figures themselves are not asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent / "bench" / "bench_replay.py"


def test_replay_benchmark_prints_rates_median_p99_and_ratios_to_its_baselines():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=240, check=True
    ).stdout
    assert re.search(r"median\s+[\d.]+ us/call\s+p99\s+[\d.]+ us/call\s+= [\d,]+k calls/s", out), out
    assert re.search(r"bare loop over the parsed calls\s+median\s+[\d.]+ us/call\s+ratio\s+[\d.]+x", out), out
    assert re.search(r"read \+ parse\s+median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms.*ratio\s+[\d.]+x", out), out
