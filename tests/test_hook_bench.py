"""bench_hook.py still runs (with --quick) and prints the figures it promises; they are not asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent / "bench" / "bench_hook.py"


def test_bench_hook_prints_cbhook_and_plugin_medians_p99_and_their_baselines():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=240, check=True
    ).stdout
    rows = re.findall(
        r"median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+baseline median\s+[\d.]+ ms\s+p99\s+[\d.]+ ms\s+ratio\s+[\d.]+x", out
    )
    assert len(rows) == 4, out  # --socket allowed and denied, $XDG_RUNTIME_DIR, the temp-dir default
    assert re.search(r"pre-execute \+ guard\s+median\s+[\d.]+ us\s+p99\s+[\d.]+ us\s+baseline median", out), out
    assert re.search(r"added median\s+-?[\d.]+ us", out), out
