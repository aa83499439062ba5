"""The integrations' shared part and their packaging, in the suite's own venv (no framework installed here):
each framework module imports nothing until used and says which extra it needs; the shared `Breaker`
against a real guard; the docs and the glossary name every integration's harness."""

from __future__ import annotations

import ast
import asyncio
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from breaker.integrations._common import Breaker, Call, deny_text
from breaker.protocol import Decision
from tests.conftest import request
from tests.waits import eventually

ROOT = Path(__file__).resolve().parents[2]
MODULES = {  # module -> (extra, the framework's top-level packages)
    "langgraph": ("langgraph", ("langchain", "langchain_core", "langgraph")),
    "openai_agents": ("openai-agents", ("agents",)),
    "pydantic_ai": ("pydantic-ai", ("pydantic_ai",)),
    "smolagents": ("smolagents", ("smolagents",)),
    "crewai": ("crewai", ("crewai",)),
}
FRAMEWORK_PACKAGES = sorted({p for _, packages in MODULES.values() for p in packages})


def harness_of(module: str) -> str:
    """The module's HARNESS constant, read from its source (importing it needs the framework)."""
    tree = ast.parse((ROOT / "breaker" / "integrations" / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "HARNESS" for t in node.targets):
            assert isinstance(node.value, ast.Constant)
            return str(node.value.value)
    raise AssertionError(f"{module} has no HARNESS")


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT)


def test_importing_the_client_and_the_integrations_package_loads_no_framework():
    out = python(f"""
        import sys
        import breaker.client, breaker.integrations, breaker.integrations._common
        print(sorted(m for m in sys.modules if m.split(".")[0] in {FRAMEWORK_PACKAGES!r}))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_an_integration_without_its_framework_says_which_extra_to_install(module):
    extra, packages = MODULES[module]
    out = python(f"""
        import importlib.abc, sys

        class Absent(importlib.abc.MetaPathFinder):  # as if the extra were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {packages!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, Absent())
        try:
            import breaker.integrations.{module}
        except ImportError as e:
            print(e)
    """)
    assert out.returncode == 0, out.stderr
    assert f"pip install 'cbconsole[{extra}]'" in out.stdout, out.stdout


def test_every_integration_has_a_harness_name_an_extra_a_docs_page_and_a_glossary_entry():
    pyproject = (ROOT / "pyproject.toml").read_text()
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for module, (extra, _) in MODULES.items():
        harness = harness_of(module)
        assert harness == extra  # one name: the extra, the harness, the docs page
        assert re.search(rf"^{re.escape(extra)} = \[", pyproject, re.M), extra
        page = ROOT / "docs" / "integrations" / f"{extra}.md"
        assert "<!-- setup -->" in page.read_text(), page
        assert f"harness is `{harness}`" in page.read_text(), page
        assert f"`{harness}`" in glossary, harness
        assert f"docs/integrations/{extra}.md" in readme, extra


def test_the_deny_text_is_the_guards_reason_or_names_the_rule():
    reason = "Circuit breaker (duplicate): stop"
    assert deny_text(Decision(False, "duplicate", reason)) == reason
    assert "cap" in deny_text(Decision(False, "cap", ""))


def test_a_tool_running_makes_its_agent_the_parent_of_any_agent_that_asks_meanwhile():
    assert Breaker.parent_of("child") is None
    with Breaker("x").running("boss"):
        assert Breaker.parent_of("child") == "boss"
        assert Breaker.parent_of("boss") is None  # an agent is never its own parent
        assert Breaker.parent_of("child", "given") == "given"
    assert Breaker.parent_of("child") is None


def test_the_breaker_asks_a_real_guard_sync_and_async_and_remembers_an_interrupt(guard):
    seen: list[tuple[str, str]] = []
    breaker = Breaker("my-framework", socket_path=guard.socket, on_interrupt=lambda a, r: seen.append((a, r)))
    call = Call("agent-1", "search", {"q": "x"}, parent="boss", call_id="c1")
    assert breaker.check(call).allowed
    breaker.report(call, "result text")
    assert asyncio.run(breaker.acheck(Call("agent-1", "search", {"q": "y"}))).allowed
    (row,) = [r for r in request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]]
    assert (row["agent"], row["harness"], row["parent"], row["calls"]) == ("agent-1", "my-framework", "boss", 2)
    assert breaker.interrupt_reason("agent-1", poll=True) is None
    request(guard.operator, {"op": "interrupt", "id": 2, "agent": "agent-1", "reason": "looping"})
    eventually(lambda: breaker.interrupt_reason("agent-1", poll=True) is not None, what="the interrupt's push")
    assert breaker.interrupt_reason("agent-1") == "looping"  # pushed, read without a call
    decision = breaker.check(call)
    assert not decision.allowed and decision.kind == "interrupted"
    assert seen == [("agent-1", "looping")]  # told once
    breaker.close()


def test_the_breaker_applies_the_failure_mode_when_the_guard_is_down(tmp_path):
    nowhere = tmp_path / "none" / "guard.sock"
    call = Call("a", "search", {})
    assert Breaker("x", socket_path=nowhere).check(call).fallback
    closed = Breaker("x", socket_path=nowhere, fail_closed=True).check(call)
    assert not closed.allowed and closed.kind == "unavailable"
    assert "unavailable" in deny_text(closed)


def test_the_guard_is_the_source_of_truth_an_interrupt_is_forgotten_once_it_judges_a_call_or_stopped_a_run(guard):
    seen: list[str] = []
    breaker = Breaker("my-framework", socket_path=guard.socket, on_interrupt=lambda a, r: seen.append(r))
    call = Call("agent-1", "search", {"q": "x"})
    assert breaker.check(call).allowed
    request(guard.operator, {"op": "interrupt", "id": 2, "agent": "agent-1", "reason": "first"})
    assert breaker.check(call).kind == "interrupted"
    assert "first" in (breaker.interrupt_reason("agent-1") or "")
    request(guard.operator, {"op": "uninterrupt", "id": 3, "agent": "agent-1"})
    assert breaker.check(call).allowed  # judged by the guard: the remembered interrupt is gone
    assert breaker.interrupt_reason("agent-1") is None
    request(guard.operator, {"op": "interrupt", "id": 4, "agent": "agent-1", "reason": "second"})
    assert breaker.check(call).kind == "interrupted"
    assert [r.endswith(("first", "second")) for r in seen] == [True, True]  # a new interrupt is told again
    assert "second" in (breaker.take_interrupt("agent-1") or "")  # it stopped a run: the next run asks the guard
    assert breaker.take_interrupt("agent-1") is None
    breaker.close()
    down = Breaker("x", socket_path=guard.socket.with_name("none.sock"))
    down._interrupted("agent-1", "seen")
    assert down.check(call).fallback and down.interrupt_reason("agent-1") == "seen"  # no answer: nothing learned
