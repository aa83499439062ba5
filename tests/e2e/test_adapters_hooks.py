"""`cbhook` in the real Claude Code, Codex CLI and Gemini CLI, against a real guard process.

Each harness is wired by the `cbconsole setup …` line docs/harnesses.md gives, run in the test's scratch
home (plus `--home` and the test guard's `--socket`); the fake model keeps asking for the same call, and
the tests check that the 7th identical call is denied and what the model reads then, how Claude Code
subagents are keyed, that an interrupt stops Claude Code through `continue: false`, and the two ways a
harness of its own can keep the guard from seeing a loop: Codex's hook trust and Gemini CLI's loop
detector.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from breaker import Config, Guard
from breaker.wiring.harnesses import settings_snippet
from tests.conftest import GuardProcess, request

from .fakemodel import FakeModel, ModelRequest, Reply, ToolCall, loop_script
from .runs import Run, Setup, run_claude, run_codex, run_gemini, stream_events
from .scenarios import CLAUDE_SPAWN, claude_bash, is_child, parent_child_script

pytestmark = pytest.mark.e2e

CBHOOK = Path(sys.executable).with_name("cbhook")
SETUP_NAMES = {"claude": "claude-code", "codex": "codex", "gemini": "gemini"}


def setup_for(harness: str, g: GuardProcess, *extra: str) -> Setup:
    """`cbconsole setup NAME` as docs/harnesses.md gives it, for the test guard's socket."""
    assert CBHOOK.exists(), f"{CBHOOK} is missing: run `.venv/bin/pip install -e .`"
    return Setup.from_docs(SETUP_NAMES[harness], g.socket, *extra)


def hooks_for(harness: str, g: GuardProcess) -> dict[str, Any]:
    """The hooks setup writes, as a settings "hooks" value, for a test that must write them itself."""
    return settings_snippet(SETUP_NAMES[harness], f"{CBHOOK} --socket {g.socket}")["hooks"]


def identical(dialect: str, step: int) -> ToolCall:
    """The same call every time, `description` included: what a harness's own loop detector catches."""
    if dialect == "responses":
        return ToolCall("exec_command", {"cmd": "echo cbprobe4"})
    if dialect == "gemini":
        return ToolCall("run_shell_command", {"command": "echo cbprobe4", "description": "Run the probe"})
    return ToolCall("Bash", {"command": "echo cbprobe4", "description": "Run the probe"})


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
        run = timed(run_claude(claude, fm, tmp_path / "claude", setup=setup_for("claude", g)))
    assert run.returncode == 0, run.describe()
    assert "Claude Code now asks the guard" in run.setup_output
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
        run = timed(run_claude(claude, fm, tmp_path / "claude", setup=setup_for("claude", g)))
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
        run = timed(run_claude(claude, fm, tmp_path / "claude", setup=setup_for("claude", g)))
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


def test_codex_after_setup_six_identical_calls_run_the_seventh_is_denied_without_bypassing_hook_trust(
    codex, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path))
    with FakeModel(loop_script(8, identical)) as fm:  # `exec_command {"cmd": "echo cbprobe4"}` every time
        run = timed(run_codex(codex, fm, tmp_path / "codex", setup=setup_for("codex", g)))
    assert run.returncode == 0, run.describe()
    assert "--dangerously-bypass-hook-trust" not in run.argv  # the hooks run because setup recorded their trust
    results = results_after_each_call(fm.agentic())
    assert len(results) == 8 and all("cbprobe4" in r for r in results[:6]), run.describe()
    reason = deny_reason("Bash")
    assert reason.endswith("stuck.")
    # Codex puts its own period after the reason: cbhook leaves its off, so the text reads "stuck. Command:".
    assert results[6:] == [f"Command blocked by PreToolUse hook: {reason} Command: echo cbprobe4"] * 2
    ((agent, view),) = agents(g).items()
    assert view["harness"] == "codex" and view["calls"] == 6
    assert [(i["agent"], i["kind"], i["tool"]) for i in incidents(tmp_path)] == [(agent, "duplicate", "Bash")]


def test_codex_exec_silently_skips_hooks_nobody_trusted_so_every_call_runs_unchecked(
    codex, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path, duplicateLimit=2))
    with FakeModel(loop_script(4, identical)) as fm:  # the hooks.json the docs gave before setup existed
        run = timed(run_codex(codex, fm, tmp_path / "codex", hooks=hooks_for("codex", g), bypass_trust=False))
    assert run.returncode == 0, run.describe()
    results = results_after_each_call(fm.agentic())
    assert len(results) == 4 and all("cbprobe4" in r and "blocked" not in r for r in results), run.describe()
    assert agents(g) == {} and incidents(tmp_path) == []  # the guard was never asked: no check, no agent
    assert "hook" not in (run.stdout + run.stderr).lower(), run.describe()  # and Codex said nothing about it


# --- Gemini CLI ----------------------------------------------------------------------------------


def test_gemini_after_setup_six_identical_calls_run_the_seventh_is_denied_and_its_own_detector_stays_quiet(
    gemini, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path))
    with FakeModel(loop_script(8, identical)) as fm:  # the very same call: Gemini CLI's detector would stop it at 5
        run = timed(run_gemini(gemini, fm, tmp_path / "gemini", setup=setup_for("gemini", g)))
    assert run.returncode == 0, run.describe()
    assert "model.disableLoopDetection: true" in run.setup_output
    settings = json.loads((run.paths["gemini_dir"] / "settings.json").read_text())
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}  # what was there stays
    results = results_after_each_call(fm.agentic())
    denied = f"Tool execution blocked: {deny_reason('run_shell_command')}"
    assert len(results) == 8 and all("cbprobe4" in r for r in results[:6]), run.describe()
    assert results[6:] == [denied] * 2, run.describe()
    assert "Loop detected" not in run.stdout
    ((line),) = incidents(tmp_path)
    assert (line["kind"], line["tool"], line["count"]) == ("duplicate", "run_shell_command", 6)
    (chat,) = (tmp_path / "gemini" / "home" / ".gemini").glob("tmp/*/chats/session-*.jsonl")
    assert line["agent"] in chat.read_text()  # the session id Gemini CLI itself records
    assert agents(g) == {}  # SessionEnd freed it


def test_gemini_left_with_its_own_loop_detector_stops_the_fifth_identical_call_before_the_guard_sees_a_loop(
    gemini, guard_factory, tmp_path, timed
):
    g = guard_factory(patch_text=layer(tmp_path))
    replies: list[dict[str, Any]] = []
    inner = loop_script(8, identical)

    def script(req: ModelRequest) -> Reply:
        if req.prior_calls == 4 and not replies:  # what the guard holds after the 4th call ran
            replies.extend(agents(g).values())
        return inner(req)

    with FakeModel(script) as fm:
        run = timed(run_gemini(gemini, fm, tmp_path / "gemini", setup=setup_for("gemini", g, "--keep-loop-detector")))
    assert run.returncode == 0, run.describe()
    assert '"disableLoopDetection"' not in (run.paths["gemini_dir"] / "settings.json").read_text()
    assert len(results_after_each_call(fm.agentic())) == 4, run.describe()  # the 5th identical call never ran
    loop = [e for e in stream_events(run) if e.get("type") == "error"]
    assert loop and loop[0]["message"] == "Loop detected, stopping execution", run.describe()
    assert [view["calls"] for view in replies] == [4] and incidents(tmp_path) == []  # no trip: the guard saw 4
