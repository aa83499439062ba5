"""`cbhook` in the real Claude Code, Codex CLI and Gemini CLI, against a real guard process.

Each harness is wired with the settings docs/harnesses.md gives (only `cbhook` becomes its full path plus
`--socket`); the fake model keeps asking for the same call, and the tests check what the model reads
after the guard denies it, how Claude Code subagents are keyed, and that an interrupt stops Claude
Code through `continue: false`.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from breaker import Config, Guard
from tests.conftest import GuardProcess, request

from .fakemodel import FakeModel, ModelRequest, Reply, loop_script
from .runs import Run, run_claude, run_codex, run_gemini, stream_events
from .scenarios import CLAUDE_SPAWN, claude_bash, is_child, parent_child_script

pytestmark = pytest.mark.e2e

CBHOOK = Path(sys.executable).with_name("cbhook")


def settings_hooks(harness: str, command: str) -> dict[str, Any]:
    """The "hooks" value of each harness's settings, as docs/harnesses.md gives it (`command` = "cbhook";
    the next test checks the page against this)."""
    if harness == "claude":
        hook = {"type": "command", "command": command, "timeout": 10}
        return {
            "PreToolUse": [{"matcher": "*", "hooks": [hook]}],
            "PostToolUse": [{"matcher": "*", "hooks": [hook]}],
            "PostToolUseFailure": [{"matcher": "*", "hooks": [hook]}],
            "SubagentStop": [{"hooks": [hook]}],
            "SessionEnd": [{"hooks": [hook]}],
        }
    if harness == "codex":
        hook = {"type": "command", "command": command, "timeout": 10}
        return {"PreToolUse": [{"matcher": "*", "hooks": [hook]}], "PostToolUse": [{"matcher": "*", "hooks": [hook]}]}
    if harness == "gemini":
        hook = {"type": "command", "command": command, "timeout": 10000}  # milliseconds in Gemini CLI
        return {
            "BeforeTool": [{"matcher": ".*", "hooks": [hook]}],
            "AfterTool": [{"matcher": ".*", "hooks": [hook]}],
            "SessionEnd": [{"hooks": [hook]}],
        }
    raise ValueError(harness)


@pytest.mark.parametrize(
    ("heading", "harness"), [("Claude Code", "claude"), ("Codex CLI", "codex"), ("Gemini CLI", "gemini")]
)
def test_the_settings_docs_give_are_those_these_tests_run_the_real_harness_with(heading, harness):
    page = (Path(__file__).resolve().parents[2] / "docs" / "harnesses.md").read_text()
    section = page.split(f"\n### {heading} ", 1)[1]
    snippet = section.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(snippet)["hooks"] == settings_hooks(harness, "cbhook")


def hooks_for(harness: str, g: GuardProcess) -> dict[str, Any]:
    assert CBHOOK.exists(), f"{CBHOOK} is missing: run `.venv/bin/pip install -e .`"
    return settings_hooks(harness, f"{CBHOOK} --socket {g.socket}")


def layer(tmp_path: Path, **config: Any) -> str:
    """A patch layer for the guard: the circuit-breaker row with an incident log and `config`."""
    values = {"incidentLog": str(tmp_path / "incidents.jsonl"), **config}
    return json.dumps([{"id": "circuit-breaker", "config": values}])


def deny_reason(tool: str, limit: int = 6) -> str:
    """The guard's deny text for the call after `limit` identical ones, from the engine itself."""
    guard = Guard(Config(duplicate_limit=limit))
    verdict = None
    for _ in range(limit + 1):
        verdict = guard.check("a", tool, {"command": "x"})
    assert verdict is not None and not verdict.allowed
    return verdict.reason


def incidents(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "incidents.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def agents(g: GuardProcess) -> dict[str, dict[str, Any]]:
    state = request(g.operator, {"op": "snapshot", "id": 1})["state"]
    return {a["agent"]: a for a in state["agents"]}


def results_after_each_call(requests: list[ModelRequest]) -> list[str]:
    by_step: dict[int, str] = {}
    for r in requests:
        if r.prior_calls and r.tool_results:
            by_step.setdefault(r.prior_calls, r.tool_results[-1])
    return [by_step[k] for k in sorted(by_step)]


def session_of(run: Run) -> str:
    (init,) = [e for e in stream_events(run) if e.get("type") == "system" and e.get("subtype") == "init"]
    return init["session_id"]


# --- Claude Code ---------------------------------------------------------------------------------


def test_claude_six_calls_run_the_seventh_is_denied_in_claudes_words_and_session_end_frees_the_agent(
    claude, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path))
    with FakeModel(loop_script(10)) as fm:  # Bash `echo cbprobe4`, a new `description` each time
        run = timed(run_claude(claude, fm, tmp_path / "claude", hooks=hooks_for("claude", g)))
    assert run.returncode == 0, run.describe()
    denied = f"PreToolUse:Bash hook error: {deny_reason('Bash')}"
    assert results_after_each_call(fm.agentic()) == ["cbprobe4"] * 6 + [denied] * 4, run.describe()
    session = session_of(run)
    assert [(i["agent"], i["kind"], i["tool"], i["count"]) for i in incidents(tmp_path)] == [
        (session, "duplicate", "Bash", 6)
    ]
    result = [e for e in stream_events(run) if e.get("type") == "result"][-1]
    assert len(result["permission_denials"]) == 4
    assert session not in agents(g)  # SessionEnd told the guard to forget it


def test_claude_subagent_calls_are_keyed_apart_from_the_main_agent(claude, guard_factory, tmp_path, timed):
    g = guard_factory(patch_text=layer(tmp_path))
    during: dict[str, Any] = {}
    child_finished = threading.Event()

    def child_ended() -> bool:  # the child said its last word and SubagentStop made the guard forget it
        return child_finished.is_set() and not any("/" in a for a in agents(g))

    inner = parent_child_script(
        spawn=CLAUDE_SPAWN,
        parent_call=claude_bash("parent"),
        child_call=claude_bash("child"),
        parent_calls=4,
        child_calls=9,
        child_ended=child_ended,
    )

    def script(req: ModelRequest) -> Reply:
        if is_child(req) and req.prior_calls == 9:
            during.update(agents(g))
            child_finished.set()
        return inner(req)

    with FakeModel(script) as fm:
        run = timed(run_claude(claude, fm, tmp_path / "claude", hooks=hooks_for("claude", g)))
    assert run.returncode == 0, run.describe()
    session = session_of(run)
    (child,) = [a for a in during if a.startswith(f"{session}/")]
    assert during[child]["parent"] == session and during[child]["harness"] == "claude-code"
    assert during[child]["calls"] == 6 and during[session]["parent"] is None
    # The child's 7th identical call is its own 7th: the parent's five did not count toward it.
    denied = f"PreToolUse:Bash hook error: {deny_reason('Bash')}"
    child_results = results_after_each_call([r for r in fm.agentic() if is_child(r)])
    assert child_results == ["cbprobe4"] * 6 + [denied] * 3, run.describe()
    parent_results = results_after_each_call([r for r in fm.agentic() if not is_child(r)])
    assert not [r for r in parent_results if "hook error" in r], run.describe()
    assert [(i["agent"], i["kind"]) for i in incidents(tmp_path)] == [(child, "duplicate")]
    assert child not in agents(g)  # SubagentStop freed it


def test_claude_operator_interrupt_stops_the_agent_with_continue_false_and_denies_its_calls(
    claude, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path))
    replies: list = []
    inner = loop_script(10)

    def script(req: ModelRequest) -> Reply:
        if req.prior_calls == 3 and not replies:  # the operator interrupts, as the console does
            ((agent, _),) = agents(g).items()
            replies.append((agent, request(g.operator, {"op": "interrupt", "id": 9, "agent": agent, "reason": "loop"})))
        return inner(req)

    with FakeModel(script) as fm:
        run = timed(run_claude(claude, fm, tmp_path / "claude", hooks=hooks_for("claude", g)))
    assert run.returncode == 0, run.describe()
    (agent, _), *_ = replies
    assert len(fm.agentic()) == 4, run.describe()  # no model request after the interrupted call
    result = [e for e in stream_events(run) if e.get("type") == "result"][-1]
    assert result["terminal_reason"] == "hook_stopped", result  # `continue: false`
    assert len(result["permission_denials"]) == 1  # ... and the call itself was denied, not run
    tool_results = [e["message"]["content"][0]["content"] for e in stream_events(run) if e.get("type") == "user"]
    assert tool_results[:3] == ["cbprobe4"] * 3
    assert tool_results[3].startswith("PreToolUse:Bash hook error: Circuit breaker (interrupted)"), tool_results
    assert [(i["agent"], i["kind"]) for i in incidents(tmp_path)] == [(agent, "interrupted")]
    # The run is over: SessionEnd made the guard forget the session, its interrupt included (as
    # `end_agent` does); a resumed session starts clean. Within the session every call was denied.
    # SessionEnd freed its counts; the operator's interrupt outlives the session (only the operator lifts it)
    assert (agents(g)[agent]["status"], agents(g)[agent]["calls"]) == ("interrupted", 0)


# --- Codex CLI -----------------------------------------------------------------------------------


def test_codex_fourth_identical_call_is_denied_and_the_model_reads_it_in_codexs_words(
    codex, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path, duplicateLimit=3))
    with FakeModel(loop_script(5)) as fm:
        run = timed(run_codex(codex, fm, tmp_path / "codex", hooks=hooks_for("codex", g)))
    assert run.returncode == 0, run.describe()
    results = results_after_each_call(fm.agentic())
    assert len(results) == 5 and all("cbprobe4" in r for r in results[:3]), run.describe()
    reason = deny_reason("Bash", limit=3)
    assert results[3:] == [f"Command blocked by PreToolUse hook: {reason}. Command: echo cbprobe4"] * 2
    ((agent, view),) = agents(g).items()
    assert view["harness"] == "codex" and view["calls"] == 3
    assert [(i["agent"], i["kind"], i["tool"]) for i in incidents(tmp_path)] == [(agent, "duplicate", "Bash")]


# --- Gemini CLI ----------------------------------------------------------------------------------


def test_gemini_fourth_identical_call_is_denied_and_the_model_reads_it_in_geminis_words(
    gemini, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path, duplicateLimit=3))
    with FakeModel(loop_script(4)) as fm:  # a new `description` each time keeps Gemini's own detector quiet
        run = timed(run_gemini(gemini, fm, tmp_path / "gemini", hooks=hooks_for("gemini", g)))
    assert run.returncode == 0, run.describe()
    results = results_after_each_call(fm.agentic())
    assert len(results) == 4 and all("cbprobe4" in r for r in results[:3]), run.describe()
    assert results[3] == f"Tool execution blocked: {deny_reason('run_shell_command', limit=3)}"
    ((line),) = incidents(tmp_path)
    assert (line["kind"], line["tool"], line["count"]) == ("duplicate", "run_shell_command", 3)
    (chat,) = (tmp_path / "gemini" / "home" / ".gemini").glob("tmp/*/chats/session-*.jsonl")
    assert line["agent"] in chat.read_text()  # the session id Gemini CLI itself records
    assert agents(g) == {}  # SessionEnd freed it
