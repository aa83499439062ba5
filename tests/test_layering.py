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

import pytest

ROOT = Path(__file__).resolve().parents[1]
UI = ("textual", "rich", "console")


# The agent frameworks' integrations import their framework, which is not installed here (each has a venv of
# its own: tests/integrations) and may well load Rich itself (smolagents does): a library for the user's own
# agent, never loaded by the guard, cbhook or cbreplay. Their shared part is imported here, framework-free.
FRAMEWORK_MODULES = {"crewai", "langgraph", "openai_agents", "pydantic_ai", "smolagents"}


def test_importing_every_breaker_module_loads_no_ui_module_even_through_a_dependency():
    modules = sorted(
        name
        for p in (ROOT / "breaker").rglob("*.py")
        for name in [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")]
        if not (name.startswith("breaker.integrations.") and name.rsplit(".", 1)[1] in FRAMEWORK_MODULES)
    )
    assert "breaker.server" in modules and "breaker.replay" in modules and "breaker.wiring.setup" in modules
    assert "breaker.integrations._common" in modules
    framework_files = {p.stem for p in (ROOT / "breaker" / "integrations").glob("*.py")} - {"__init__", "_common"}
    assert framework_files == FRAMEWORK_MODULES  # a new integration is named here, or it is imported above
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {UI!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert json.loads(out) == []


def loaded_ui_modules(argv: list[str]) -> list[str]:
    """Run `cbconsole ARGV` (its entry point, `breaker.cli.main`) in a fresh interpreter; the UI modules it loaded."""
    code = (
        "import json, sys\n"
        "from breaker.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {UI!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv", [["setup", "--help"], ["doctor", "--help"], ["--headless", "--help"]])
def test_cbconsole_setup_doctor_and_the_headless_guard_load_no_ui_module(argv):
    assert loaded_ui_modules(argv) == []


def test_the_cbconsole_command_reaches_the_console_by_name_and_answers_its_flags_without_textual():
    loaded = loaded_ui_modules(["--version"])  # the console's own flag: its parser answers it
    assert "console.command" in loaded
    assert not [m for m in loaded if m.split(".")[0] in ("textual", "rich")]
