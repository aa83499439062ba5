"""Warnings and results with the real harnesses (dsh, Claude Code, Codex CLI, Gemini CLI) against a
real guard process under the `recommended` preset (its repeat rule, warning and progress).

For each harness, wired as docs/harnesses.md says (PreToolUse/PostToolUse, BeforeTool/AfterTool, the
dsh plugin):

- the warning the guard gives an identical call in a row reaches the model in the request
  right after that call, through the harness's own channel, once; a later call is denied;
- a command whose output changes at every run (a counter file) runs past the repeat limit, because
  each call's result is reported and counts as progress; the same loop with a constant output is
  then denied.

Everything is counted from the fake model's requests and the guard's own view: nothing depends on timing.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from breaker import Config, Guard
from breaker.engine import Verdict
from tests.conftest import GuardProcess, request

from .fakemodel import FakeModel, ModelRequest, Reply, Text, ToolCall, default_call
from .runs import Run, run_claude, run_codex, run_dsh_with, run_gemini
from .test_adapters_dsh import plugin_guard, setup_dsh
from .test_adapters_hooks import layer, setup_for

pytestmark = pytest.mark.e2e

CONSTANT = "echo cbprobe4"
COUNTER = "echo x >> cbcount && wc -l < cbcount"  # 1, 2, 3...: a different output at every run
TOOLS = {"dsh": "bash", "claude": "Bash", "codex": "Bash", "gemini": "run_shell_command"}  # as the guard sees them


def expected(tool: str, commands: list[str], *, report: bool = True) -> list[Verdict]:
    """What the guard decides for these calls in a row under `recommended`, from the engine itself
    (so the tests follow the preset's tuning): each allowed call's output (the counter's count, or
    "cbprobe4") reported as its result when `report`."""
    guard = Guard(Config.with_preset("recommended"))
    verdicts, runs = [], 0
    for n, command in enumerate(commands):
        verdict = guard.check("a", tool, {"command": command}, call_id=n)
        verdicts.append(verdict)
        if verdict.allowed and report:
            runs += command == COUNTER
            guard.result("a", str(runs) if command == COUNTER else "cbprobe4", call_id=n)
    return verdicts


def shell(dialect: str, step: int, command: str) -> ToolCall:
    """The probe call of each dialect (a new `description` each step, as a model writes), running `command`."""
    call = default_call(dialect, step)
    key = "cmd" if dialect == "responses" else "command"
    return ToolCall(call.name, {**call.args, key: command})


def commands_script(commands: list[str]) -> Any:
    def script(req: ModelRequest) -> Reply:
        k = req.prior_calls
        return shell(req.dialect, k + 1, commands[k]) if k < len(commands) else Text("Done.")

    return script


def after_each_call(fm: FakeModel) -> list[ModelRequest]:
    """The first agent request after each call (index 0 = after call 1)."""
    by_step: dict[int, ModelRequest] = {}
    for r in fm.agentic():
        if r.prior_calls:
            by_step.setdefault(r.prior_calls, r)
    return [by_step[k] for k in sorted(by_step)]


def count_in(req: ModelRequest, text: str) -> int:
    return req.raw.count(json.dumps(text)[1:-1])


def tally(g: GuardProcess) -> tuple[int, int, dict[str, int]]:
    """(checks, warnings, denies by kind) over the guard's life: agents a harness ended are counted too."""
    stats = request(g.operator, {"op": "stats", "id": 1})["stats"]
    return stats["checks"], stats["warnings"], {k: n for k, n in stats["denies"].items() if n}


def run_harness(harness: str, fixtures: dict[str, Any], fm: FakeModel, tmp_path: Path, g: GuardProcess) -> Run:
    if harness == "dsh":
        return run_dsh_with(fixtures["dsh"], fm, tmp_path / "dsh", setup=setup_dsh(g.socket))
    runner = {"claude": run_claude, "codex": run_codex, "gemini": run_gemini}[harness]
    return runner(fixtures[harness], fm, tmp_path / harness, setup=setup_for(harness, g))


def guard_for(harness: str, guard_factory: Any, tmp_path: Path) -> GuardProcess:
    if harness == "dsh":  # the guard's own layer configures it; `cbconsole setup dsh` wires dsh to it
        return plugin_guard(guard_factory, tmp_path, preset="recommended")
    return guard_factory(patch_text=layer(tmp_path, preset="recommended"))


@pytest.fixture
def fixtures(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The one harness a parametrized test runs, installed (or reused) by its session fixture."""
    harness = request.node.callspec.params["harness"]
    return {harness: request.getfixturevalue(harness)}


def delivered(harness: str, req: ModelRequest, warning: str, result: str) -> bool:
    """The warning is in `req` through the harness's own channel (seen in real runs, docs/harnesses.md)."""
    body = req.body
    if harness == "claude":  # PreToolUse additionalContext: a system message after the tool result
        return any(
            m.get("role") == "system" and f"PreToolUse:Bash hook additional context: {warning}" in _text(m)
            for m in body["messages"]
        )
    if harness == "codex":  # PreToolUse additionalContext: a developer message
        return any(
            item.get("type") == "message" and item.get("role") == "developer" and _text(item) == warning
            for item in body["input"]
        )
    if harness == "gemini":  # AfterTool additionalContext: appended to the tool's result
        return result.endswith(f"\n\n<hook_context>{warning}</hook_context>")
    if harness == "dsh":  # post-execute additionalContexts: a user message right after the result
        messages = body["messages"]
        return any(
            m.get("role") == "tool" and nxt.get("role") == "user" and _text(nxt) == warning
            for m, nxt in itertools.pairwise(messages)
        )
    raise ValueError(harness)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def check_run(harness: str, fm: FakeModel, run: Run, g: GuardProcess, verdicts: list[Verdict]) -> list[str]:
    """The run went as the engine says, call by call: each warning reached the model right after its
    call, through the harness's channel, and only once; each deny's reason came back as the call's
    result; the guard counted as much. Returns the results the model read."""
    assert run.returncode == 0, run.describe()
    after = after_each_call(fm)
    assert len(after) == len(verdicts), run.describe()
    results = [r.tool_results[-1] for r in after]
    warnings = {v.warning for v in verdicts if v.warning}
    for n, (verdict, req, result) in enumerate(zip(verdicts, after, results, strict=True)):
        if verdict.allowed:
            assert "Circuit breaker (" not in result, (n, results)
        else:
            assert verdict.reason in result, (n, results)
        for text in warnings:  # nothing new but this call's own warning
            before = count_in(after[n - 1], text) if n else 0
            assert count_in(req, text) == before + (text == verdict.warning), (n, text, run.describe())
        if verdict.warning:
            assert delivered(harness, req, verdict.warning, result), req.raw[-3000:]
    denies: dict[str, int] = {}
    for v in verdicts:
        if not v.allowed:
            denies[v.kind] = denies.get(v.kind, 0) + 1
    assert tally(g) == (len(verdicts), sum(1 for v in verdicts if v.warning), denies)
    return results


HARNESSES = ["dsh", "claude", "codex", "gemini"]


@pytest.mark.parametrize("harness", HARNESSES)
def test_the_warning_reaches_the_model_through_each_harnesss_channel_before_the_deny(
    harness, fixtures, guard_factory, tmp_path, timed
):
    commands = [CONSTANT] * 4  # 4 identical calls: Gemini CLI's own loop detector stays quiet
    verdicts = expected(TOOLS[harness], commands)
    # The preset warns before it denies within these calls, or this test proves nothing.
    warned = [n for n, v in enumerate(verdicts) if v.warning]
    assert warned and not verdicts[-1].allowed and warned[0] < len(verdicts) - 1, verdicts
    g = guard_for(harness, guard_factory, tmp_path)
    with FakeModel(commands_script(commands)) as fm:
        run = timed(run_harness(harness, fixtures, fm, tmp_path, g))
    results = check_run(harness, fm, run, g, verdicts)
    assert all("cbprobe4" in r for r, v in zip(results, verdicts, strict=True) if v.allowed)


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_repeated_command_whose_output_changes_runs_past_the_repeat_limit_and_a_constant_one_is_denied(
    harness, fixtures, guard_factory, tmp_path, timed
):
    commands = [COUNTER] * 6 + [CONSTANT] * 4  # the counter twice past repeatLimit, then a constant loop
    verdicts = expected(TOOLS[harness], commands)
    # Reported results are what lets the counter run: without them the engine denies it. (It may
    # still warn a counter call: at its check, the engine cannot know its output will differ.)
    assert all(v.allowed for v in verdicts[:6]), verdicts
    assert not all(v.allowed for v in expected(TOOLS[harness], commands[:6], report=False))
    assert not verdicts[-1].allowed, verdicts
    g = guard_for(harness, guard_factory, tmp_path)
    with FakeModel(commands_script(commands)) as fm:
        run = timed(run_harness(harness, fixtures, fm, tmp_path, g))
    results = check_run(harness, fm, run, g, verdicts)
    for n, result in enumerate(results[:6], 1):  # every counter call ran, and its own count came back
        assert re.search(rf"(?m)^(Output: )?{n}$", result), results
