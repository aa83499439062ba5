"""What import-linter cannot see: the modules `breaker` really loads at run time.

`lint-imports` (run by CI; contracts in pyproject.toml) checks the imports written in `breaker`'s own
files. It does not follow a third-party package's imports, nor an import built at run time, so a
dependency that pulls in Rich (many CLI libraries do) would pass it. This test imports every module
of `breaker` in a fresh interpreter and looks at what was loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UI = ("textual", "rich", "console")


def test_importing_every_breaker_module_loads_no_ui_module_even_through_a_dependency():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "breaker").rglob("*.py")
    )
    assert "breaker.server" in modules and "breaker.replay" in modules and "breaker.wiring.setup" in modules
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {UI!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert json.loads(out) == []
