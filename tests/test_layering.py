"""The guard side stays free of the UI: importing `breaker` must not pull in Textual or Rich."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_importing_breaker_loads_no_ui_module():
    code = (
        "import sys, breaker, breaker.patch, breaker.reload; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'textual', 'rich', 'console'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_no_module_under_breaker_imports_textual_rich_or_console():
    offenders = []
    for path in (ROOT / "breaker").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in {"textual", "rich", "console"}
            ]
    assert offenders == []


def test_import_linter_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
